/* test_inputs.c -- the inputs suite: checkpoint jobs through the real quantd (issue 11 items 1
 * and 2). The 2-shard fixture uploaded file by file (POST /v1/jobs with "files", then
 * PUT /v1/jobs/{id}/inputs/{name}) gives outputs byte-identical to `quant quantize` on the same
 * directory in both layouts, and outputs.tar extracts to that directory; quantization is seen
 * to start while a shard's last bytes are held back; uploads cut at several offsets, a wrong
 * Content-Length, a bad header mid-way, a file not listed, a duplicate PUT, a file that never
 * comes (input_timeout) and a cancel each fail the job with a clear error, nothing published
 * and nothing left in the data directory; the creation checks and their limits
 * (max_input_files, max_input_name); the single-shard POST /v1/jobs?ruleset= as the one-file
 * case (a body cut in its header makes no job, cut later fails the job made from its header;
 * quantized while its last byte is held back; a wrong Content-Length refused with no job);
 * examples/upload_checkpoint.sh against the daemon; the registry's whole (readable) before
 * complete (synced).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "inputs.h"
#include "qdproc.h"
#include "quant_pipeline.h"
#include "store.h"
#include "qdtest.h"

#define SHARDED "tests/data/stories260K-bf16-sharded"
#define RULES   "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}"
#define SHARD1  "model-00001-of-00002.safetensors"
#define SHARD2  "model-00002-of-00002.safetensors"
#define FILES   "[\"config.json\",\"" SHARD1 "\",\"" SHARD2 "\",\"model.safetensors.index.json\"]"

static const char *const fixture_files[] = {"config.json", SHARD1, SHARD2,
                                            "model.safetensors.index.json", NULL};

static const char *quant_bin(void)
{
    return getenv("QUANT_BIN") ? getenv("QUANT_BIN") : "build/bin/quant";
}

static void start(qdp *d, const char *const *extra)
{
    qdp_start(d, extra);
    qdp_resp r =
        qdp_req(d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_msg(r.status == 201 || r.status == 200, "PUT ruleset: %ld %s", r.status, r.body);
    qdp_resp_free(&r);
}

/* POST /v1/jobs with body; must answer `status`; returns the job id (201) or 0. */
static long long create(qdp *d, const char *body, long status, const char *code)
{
    qdp_resp r = qdp_req(d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
    ck_assert_msg(r.status == status, "POST %s: %ld %s", body, r.status, r.body);
    json_t *j = qdp_json(&r);
    long long id = 0;
    if (status == 201) {
        ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "receiving");
        char *loc = qdp_header(&r, "location"), want[64];
        id = (long long)json_integer_value(json_object_get(j, "id"));
        snprintf(want, sizeof want, "/v1/jobs/%lld", id);
        ck_assert_str_eq(loc, want);
        free(loc);
    } else if (code) {
        const char *got = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
        ck_assert_msg(got && strcmp(got, code) == 0, "POST %s: %s, wanted %s", body, r.body, code);
    }
    json_decref(j);
    qdp_resp_free(&r);
    return id;
}

static long long create_fixture_job(qdp *d, const char *layout)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"layout\":\"%s\",\"files\":" FILES "}",
             layout);
    return create(d, body, 201, NULL);
}

/* PUT of len bytes as file `name` of job id; must answer status (and code when not NULL). A
 * refusal decided before the body (404, 409) is sent with a body small enough to be in the
 * socket before the answer comes back (curl would otherwise see the connection close while it
 * still sends). */
static void put_bytes(qdp *d, long long id, const char *name, const void *p, size_t len,
                      long status, const char *code)
{
    char path[512];
    snprintf(path, sizeof path, "/v1/jobs/%lld/inputs/%s", id, name);
    qdp_resp r = qdp_req(d, "PUT", path, "application/octet-stream", p ? p : "", len, NULL);
    ck_assert_msg(r.status == status, "PUT %s: %ld %s (wanted %ld)", name, r.status, r.body,
                  status);
    if (code) {
        json_t *j = qdp_json(&r);
        const char *got = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
        ck_assert_msg(got && strcmp(got, code) == 0, "PUT %s: %s, wanted %s", name, r.body, code);
        json_decref(j);
    }
    qdp_resp_free(&r);
}

static void put_file(qdp *d, long long id, const char *name, long status, const char *code)
{
    char path[512];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", SHARDED, name);
    void *p = qdt_read_file(path, &len);
    put_bytes(d, id, name, p, len, status, code);
    free(p);
}

/* Entries of dir (not . or ..); 0 when it does not exist. */
static int entries(const char *dir)
{
    DIR *dd = opendir(dir);
    if (!dd) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dd)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(dd);
    return n;
}

/* The job ended failed (or `state`), its error holds `needle`, and nothing is left of it: no
 * upload in DATA/uploads, no DATA/jobs/ID, no outputs. */
static void expect_ended(qdp *d, long long id, const char *state, const char *needle)
{
    json_t *j = qdp_wait_job(d, id, 30);
    const char *st = json_string_value(json_object_get(j, "state"));
    const char *err = json_string_value(json_object_get(j, "error"));
    ck_assert_msg(strcmp(st, state) == 0, "job %lld is %s (%s), wanted %s", id, st, err ? err : "-",
                  state);
    ck_assert_msg(err && strstr(err, needle), "job %lld error '%s' lacks '%s'", id, err ? err : "-",
                  needle);
    ck_assert_ptr_null(json_object_get(j, "outputs"));
    json_decref(j);
    char path[4096];
    snprintf(path, sizeof path, "%s/uploads", d->data_dir);
    for (int i = 0; i < 100 && entries(path) != 0; i++) kit_sleep_ms(20);
    ck_assert_msg(entries(path) == 0, "job %lld left files in DATA/uploads", id);
    snprintf(path, sizeof path, "%s/jobs/%lld", d->data_dir, id);
    ck_assert_msg(entries(path) == 0, "job %lld left DATA/jobs/%lld", id, id);
}

/* ---- the whole checkpoint ---------------------------------------------------------------------
 */

/* `quant quantize` of the fixture directory (layout) into a fresh directory; returned. */
static char *cli_outputs(const char *layout)
{
    char *root = qdt_tmpdir(), cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/rules.json", root);
    ck_assert_int_eq(kit_write_file(cmd, RULES, strlen(RULES)), 0);
    snprintf(cmd, sizeof cmd,
             "%s quantize --rules %s/rules.json --layout %s %s %s/out >/dev/null 2>&1", quant_bin(),
             root, layout, SHARDED, root);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm %s/out/quant-report.json", root); /* the daemon serves /report */
    ck_assert_int_eq(system(cmd), 0);
    return root;
}

static void roundtrip(const char *layout)
{
    qdp d;
    start(&d, NULL);
    long long id = create_fixture_job(&d, layout);
    for (int i = 0; fixture_files[i]; i++) put_file(&d, id, fixture_files[i], 200, NULL);
    json_t *j = qdp_wait_job(&d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    ck_assert_uint_eq(json_array_size(json_object_get(j, "outputs")), 4);
    ck_assert(json_is_array(json_object_get(j, "unused_rules"))); /* from the plan or report */
    json_decref(j);
    char *cli = cli_outputs(layout), cmd[8192];
    /* every output byte-identical to the CLI's, and the tar extracts to that directory */
    snprintf(cmd, sizeof cmd, "diff -r %s/out %s/jobs/%lld/output", cli, d.data_dir, id);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs.tar", id);
    qdp_resp r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    snprintf(cmd, sizeof cmd, "%s/o.tar", cli);
    ck_assert_int_eq(kit_write_file(cmd, r.body, r.len), 0);
    qdp_resp_free(&r);
    snprintf(cmd, sizeof cmd, "mkdir %s/x && tar -x -C %s/x -f %s/o.tar && diff -r %s/out %s/x",
             cli, cli, cli, cli, cli);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    snprintf(path, sizeof path, "%s/uploads", d.data_dir);
    ck_assert_int_eq(entries(path), 0); /* the inputs are gone once the job is over */
    kit_rmtree(cli);
    free(cli);
    qdp_stop(&d);
}

START_TEST(test_roundtrip_native)
{
    roundtrip("native");
}
END_TEST

START_TEST(test_roundtrip_compressed_tensors)
{
    roundtrip("compressed-tensors");
}
END_TEST

/* ---- raw uploads: cut, held back ---------------------------------------------------------------
 */

/* The cut-upload tests run with a short idle_timeout. A client that closes its connection in the
 * middle of a body is normally seen at once (libmicrohttpd ends the request as client_abort), but
 * on a loaded machine libmicrohttpd 0.9.75 (epoll, thread pool) now and then misses the close of
 * a connection whose body it has wholly handed over, and the request only ends at the idle
 * timeout (as "timeout"): either way the job must fail with the same error and leave nothing. */
static const char *const cut_args[] = {"--idle-timeout", "3", NULL};

/* Opens a PUT of `name` announcing `announced` bytes and sends the first `send` bytes of p. */
static int raw_put(qdp *d, long long id, const char *name, const char *p, size_t announced,
                   size_t send)
{
    int fd = qdp_raw_connect(d);
    char head[512];
    int n =
        snprintf(head, sizeof head,
                 "PUT /v1/jobs/%lld/inputs/%s HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n",
                 id, name, announced);
    ck_assert(qdp_send_all(fd, head, (size_t)n));
    if (send) ck_assert(qdp_send_all(fd, p, send));
    return fd;
}

START_TEST(test_cut_uploads)
{
    qdp d;
    start(&d, cut_args);
    size_t len;
    char *shard = qdt_read_file(SHARDED "/" SHARD2, &len);
    /* in the length prefix, in the header, mid-tensor, the last byte missing */
    const size_t cuts[] = {5, 100, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        long long id = create_fixture_job(&d, "native");
        put_file(&d, id, SHARD1, 200, NULL);
        int fd = raw_put(&d, id, SHARD2, shard, len, cuts[i]);
        kit_sleep_ms(100);
        close(fd); /* the client leaves */
        expect_ended(&d, id, "failed", SHARD2);
        json_t *j = qdp_get_job(&d, id);
        ck_assert_ptr_nonnull(
            strstr(json_string_value(json_object_get(j, "error")), "did not complete"));
        json_decref(j);
    }
    free(shard);
    qdp_stop(&d);
}
END_TEST

/* The run starts before the upload ends: all files but the last byte of shard 2 in, the job
 * reports tensors done (shard 1's) while it waits; the last byte ends it. */
START_TEST(test_quantizes_while_receiving)
{
    qdp d;
    start(&d, NULL);
    long long id = create_fixture_job(&d, "native");
    kit_sleep_ms(400); /* progress is stored at most every 250 ms from the claim */
    put_file(&d, id, "config.json", 200, NULL);
    put_file(&d, id, "model.safetensors.index.json", 200, NULL);
    put_file(&d, id, SHARD1, 200, NULL);
    size_t len;
    char *shard = qdt_read_file(SHARDED "/" SHARD2, &len);
    int fd = raw_put(&d, id, SHARD2, shard, len, len - 1);
    long long done = 0;
    for (int i = 0; i < 500 && done == 0; i++) {
        json_t *j = qdp_get_job(&d, id);
        ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "running");
        done = json_integer_value(json_object_get(json_object_get(j, "progress"), "tensors_done"));
        json_decref(j);
        if (!done) kit_sleep_ms(20);
    }
    ck_assert_msg(done > 0, "no tensor quantized while the upload was held back");
    ck_assert(qdp_send_all(fd, shard + len - 1, 1));
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    ck_assert_int_gt(n, 12);
    buf[n] = '\0';
    ck_assert_msg(strncmp(buf, "HTTP/1.1 200", 12) == 0, "%s", buf);
    close(fd);
    free(shard);
    json_t *j = qdp_wait_job(&d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    json_decref(j);
    qdp_stop(&d);
}
END_TEST

/* ---- the single-shard POST /v1/jobs?ruleset=: the one-file case ------------------------------
 */

/* Opens POST /v1/jobs?ruleset=int8 announcing `announced` bytes and sends the first `send`. */
static int raw_post(qdp *d, const char *p, size_t announced, size_t send)
{
    int fd = qdp_raw_connect(d);
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST /v1/jobs?ruleset=int8 HTTP/1.1\r\nHost: t\r\nContent-Type: "
                     "application/octet-stream\r\nContent-Length: %zu\r\n\r\n",
                     announced);
    ck_assert(qdp_send_all(fd, head, (size_t)n));
    if (send) ck_assert(qdp_send_all(fd, p, send));
    return fd;
}

/* The jobs there are, and the newest one's id (0: none). */
static size_t jobs_and_newest(qdp *d, long long *newest)
{
    qdp_resp r = qdp_req(d, "GET", "/v1/jobs", NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    json_t *doc = qdp_json(&r), *jobs = json_object_get(doc, "jobs");
    size_t n = json_array_size(jobs);
    *newest = 0;
    for (size_t i = 0; i < n; i++) {
        long long id = json_integer_value(json_object_get(json_array_get(jobs, i), "id"));
        if (id > *newest) *newest = id;
    }
    json_decref(doc);
    qdp_resp_free(&r);
    return n;
}

/* A body cut in its header never makes a job; cut after it (mid-tensor, the last byte missing),
 * the job created from its header fails naming the file, nothing left. */
START_TEST(test_shard_post_cut)
{
    qdp d;
    start(&d, cut_args);
    size_t len;
    char *shard = qdt_read_file(SHARDED "/" SHARD2, &len);
    long long newest;
    int fd = raw_post(&d, shard, len, 100);
    kit_sleep_ms(100);
    close(fd);
    kit_sleep_ms(100);
    ck_assert_int_eq(jobs_and_newest(&d, &newest), 0);
    const size_t cuts[] = {len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        fd = raw_post(&d, shard, len, cuts[i]);
        size_t had = i;
        for (int k = 0; k < 250 && jobs_and_newest(&d, &newest) == had; k++) kit_sleep_ms(20);
        ck_assert_int_eq(jobs_and_newest(&d, &newest), had + 1);
        close(fd);
        expect_ended(&d, newest, "failed", "the upload of 'model.safetensors' did not complete");
    }
    free(shard);
    qdp_stop(&d);
}
END_TEST

/* The run starts before the body ends: the shard's last byte held back, the job (made from the
 * header) reports tensors done; the last byte brings the 202. A Content-Length other than the
 * header's size is 400 length_mismatch with no job. */
START_TEST(test_shard_post_streams)
{
    qdp d;
    start(&d, NULL);
    size_t len;
    char *shard = qdt_read_file(SHARDED "/" SHARD2, &len);
    long long id = 0, done = 0;
    qdp_resp r = qdp_req(&d, "POST", "/v1/jobs?ruleset=int8", "application/octet-stream", shard,
                         len - 1, NULL);
    ck_assert_msg(r.status == 400 && strstr(r.body, "length_mismatch"), "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
    ck_assert_int_eq(jobs_and_newest(&d, &id), 0);
    unsigned long long hlen = 0; /* little-endian length prefix */
    for (int b = 7; b >= 0; b--) hlen = hlen << 8 | (unsigned char)shard[b];
    int fd = raw_post(&d, shard, len, (size_t)(8 + hlen)); /* the header alone: the job */
    for (int i = 0; i < 250 && id == 0; i++) {
        jobs_and_newest(&d, &id);
        if (id == 0) kit_sleep_ms(20);
    }
    ck_assert_msg(id > 0, "no job made from the header");
    kit_sleep_ms(400); /* progress is stored at most every 250 ms from the claim */
    ck_assert(qdp_send_all(fd, shard + 8 + hlen, len - 1 - (size_t)(8 + hlen)));
    for (int i = 0; i < 500 && done == 0; i++) {
        json_t *j = qdp_get_job(&d, id);
        done = json_integer_value(json_object_get(json_object_get(j, "progress"), "tensors_done"));
        const char *st = json_string_value(json_object_get(j, "state"));
        ck_assert_msg(strcmp(st, "running") == 0 || strcmp(st, "receiving") == 0, "%s", st);
        json_decref(j);
        if (!done) kit_sleep_ms(20);
    }
    ck_assert_msg(done > 0, "no tensor quantized while the body was held back");
    ck_assert(qdp_send_all(fd, shard + len - 1, 1));
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    ck_assert_int_gt(n, 12);
    buf[n] = '\0';
    ck_assert_msg(strncmp(buf, "HTTP/1.1 202", 12) == 0, "%s", buf);
    close(fd);
    free(shard);
    json_t *j = qdp_wait_job(&d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    json_decref(j);
    qdp_stop(&d);
}
END_TEST

/* ---- refusals ---------------------------------------------------------------------------------
 */

START_TEST(test_bad_inputs)
{
    qdp d;
    start(&d, NULL);
    size_t len;
    char *shard = qdt_read_file(SHARDED "/" SHARD2, &len);

    /* a file not listed 404, a duplicate 409; both leave the job receiving */
    long long id = create_fixture_job(&d, "native");
    put_file(&d, id, "config.json", 200, NULL);
    put_bytes(&d, id, "tokenizer.json", "{}", 2, 404, "unknown_input");
    put_bytes(&d, id, "config.json", "{}", 2, 409, "input_already_sent");
    json_t *j = qdp_get_job(&d, id);
    const char *st = json_string_value(json_object_get(j, "state"));
    ck_assert_msg(strcmp(st, "running") == 0 || strcmp(st, "receiving") == 0, "%s", st);
    json_decref(j);
    /* a Content-Length other than the size the header implies: 400 at once, the job fails */
    char *longer = malloc(len + 7);
    memcpy(longer, shard, len);
    memset(longer + len, 0, 7);
    put_bytes(&d, id, SHARD2, longer, len + 7, 400, "length_mismatch");
    expect_ended(&d, id, "failed", "Content-Length");
    put_bytes(&d, id, SHARD1, "x", 1, 409, "not_receiving"); /* over: no more files */

    /* the body shorter than its header implies (chunk-free, whole): 400, the job fails */
    id = create_fixture_job(&d, "native");
    put_bytes(&d, id, SHARD2, shard, len - 4, 400, "length_mismatch");
    expect_ended(&d, id, "failed", SHARD2);

    /* a bad header mid-way (shard 1 in, shard 2's header broken): 422, the job fails */
    id = create_fixture_job(&d, "native");
    put_file(&d, id, SHARD1, 200, NULL);
    char *bad = malloc(len);
    memcpy(bad, shard, len);
    bad[9] = '!'; /* inside the JSON header */
    put_bytes(&d, id, SHARD2, bad, len, 422, "bad_safetensors");
    expect_ended(&d, id, "failed", SHARD2);

    /* a header that says more than the whole body */
    id = create_fixture_job(&d, "native");
    put_bytes(&d, id, SHARD1, "\xff\xff\xff\xff\x00\x00\x00\x00{}", 10, 422, "bad_safetensors");
    expect_ended(&d, id, "failed", SHARD1);

    /* a cancel while receiving: cancelled, files removed */
    id = create_fixture_job(&d, "native");
    put_file(&d, id, SHARD1, 200, NULL);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    qdp_resp r = qdp_req(&d, "DELETE", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200 || r.status == 202, "DELETE: %ld %s", r.status, r.body);
    qdp_resp_free(&r);
    expect_ended(&d, id, "cancelled", "cancelled");
    put_bytes(&d, id, SHARD2, "x", 1, 409, "not_receiving");

    /* no such job */
    put_bytes(&d, 999, SHARD1, "x", 1, 404, "not_found");
    free(bad);
    free(longer);
    free(shard);
    qdp_stop(&d);
}
END_TEST

START_TEST(test_input_timeout)
{
    qdp d;
    const char *args[] = {"--input-timeout", "1", NULL};
    start(&d, args);
    long long id = create_fixture_job(&d, "native");
    put_file(&d, id, "config.json", 200, NULL);
    put_file(&d, id, SHARD1, 200, NULL);
    put_file(&d, id, "model.safetensors.index.json", 200, NULL);
    expect_ended(&d, id, "failed", "input_timeout");
    json_t *j = qdp_get_job(&d, id);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(j, "error")), SHARD2));
    json_decref(j);
    put_bytes(&d, id, SHARD2, "x", 1, 409, "not_receiving");
    qdp_stop(&d);
}
END_TEST

START_TEST(test_create_checks)
{
    qdp d;
    const char *args[] = {"--max-input-files", "3", "--max-input-name", "20", NULL};
    start(&d, args);
    const char *bad[] = {
        "{\"ruleset\":\"int8\",\"files\":[]}", "{\"ruleset\":\"int8\",\"files\":\"a.safetensors\"}",
        "{\"ruleset\":\"int8\",\"files\":[\"a/b.safetensors\"]}",
        "{\"ruleset\":\"int8\",\"files\":[\"..\",\"a.safetensors\"]}",
        "{\"ruleset\":\"int8\",\"files\":[\".hidden\",\"a.safetensors\"]}",
        "{\"ruleset\":\"int8\",\"files\":[\"\",\"a.safetensors\"]}",
        "{\"ruleset\":\"int8\",\"files\":[\"a\\nb\",\"a.safetensors\"]}",
        "{\"ruleset\":\"int8\",\"files\":[\"a.safetensors\",\"a.safetensors\"]}",
        "{\"ruleset\":\"int8\",\"files\":[\"config.json\"]}",
        "{\"ruleset\":\"int8\",\"files\":[7]}",
        /* max_input_name 20: 21 bytes */
        "{\"ruleset\":\"int8\",\"files\":[\"abcdefghi.safetensors\"]}",
        /* max_input_files 3 */
        "{\"ruleset\":\"int8\",\"files\":[\"a.safetensors\",\"b\",\"c\",\"d\"]}",
        "{\"ruleset\":\"int8\",\"layout\":\"ggml\",\"files\":[\"a.safetensors\"]}",
        "{\"ruleset\":\"int8\",\"files\":[\"a.safetensors\"],\"source\":{\"path\":\"/x\"}}",
        "{\"ruleset\":\"int8\",\"files\":[\"a.safetensors\"],\"colour\":1}", NULL};
    for (int i = 0; bad[i]; i++) create(&d, bad[i], 400, "invalid");
    create(&d, "{\"ruleset\":\"int8\",\"files\":[\"a\\u0000b\",\"a.safetensors\"]}", 400,
           "bad_json"); /* no NUL gets past the JSON parser */
    create(&d, "{\"ruleset\":\"nope\",\"files\":[\"a.safetensors\"]}", 422, "unknown_ruleset");
    /* the gguf layout reads a server-side GGUF file, not uploaded files */
    create(&d, "{\"ruleset\":\"int8\",\"layout\":\"gguf\",\"files\":[\"a.safetensors\"]}", 422,
           "invalid_job");
    create(&d, "{\"ruleset\":\"int8\",\"stats_model\":\"nope\",\"files\":[\"a.safetensors\"]}", 422,
           "unknown_stats_model");
    /* at the limits: 20 bytes, 3 files */
    long long id = create(
        &d, "{\"ruleset\":\"int8\",\"files\":[\"abcdefgh.safetensors\",\"b\",\"c\"]}", 201, NULL);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs?state=receiving");
    qdp_resp r = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    qdp_resp_free(&r);
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    r = qdp_req(&d, "DELETE", path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == 200 || r.status == 202, "DELETE: %ld %s", r.status, r.body);
    qdp_resp_free(&r);
    expect_ended(&d, id, "cancelled", "cancelled");
    qdp_stop(&d);
}
END_TEST

/* ---- the registry (inputs.c) ------------------------------------------------------------------
 */

/* A file whose bytes are all in (qd_inputs_whole) satisfies the run's whole-file wait at once,
 * while it is still being synced: it is not yet received (missing, expired at its deadline, the
 * job not complete) until qd_inputs_complete. Before that, the wait gives up at the deadline. */
START_TEST(test_whole_before_synced)
{
    qd_inputs *in;
    qd_err err;
    ck_assert_int_eq(qd_inputs_new(&in, &err), QD_OK);
    const char *names[] = {"a.safetensors"};
    ck_assert_int_eq(qd_inputs_add(in, 7, names, 1, qd_now_ms() + 300, &err), QD_OK);
    qd_job_inputs *ji = qd_inputs_get(in, 7);
    size_t idx = 9;
    ck_assert_int_eq(qd_inputs_begin(ji, "a.safetensors", &idx, &err), QD_OK);
    ck_assert_uint_eq(idx, 0);
    qd_inputs_progress(ji, idx, 100);
    char why[128] = "";
    ck_assert(qd_inputs_wait(ji, "a.safetensors", 100, why, sizeof why));
    ck_assert(!qd_inputs_wait(ji, "a.safetensors", QUANT_INPUT_WHOLE, why, sizeof why));
    ck_assert_msg(strstr(why, "input_timeout"), "%s", why);
    qd_inputs_whole(ji, idx);
    ck_assert(qd_inputs_wait(ji, "a.safetensors", QUANT_INPUT_WHOLE, why, sizeof why));
    char missing[64];
    ck_assert_uint_eq(qd_inputs_missing(ji, missing, sizeof missing), 1);
    int64_t *ids = NULL;
    size_t n = 0;
    ck_assert_int_eq(qd_inputs_expired(in, qd_now_ms() + 1000, &ids, &n, &err), QD_OK);
    ck_assert_uint_eq(n, 1);
    free(ids);
    ck_assert(qd_inputs_complete(ji, idx));
    ck_assert_uint_eq(qd_inputs_missing(ji, missing, sizeof missing), 0);
    qd_inputs_release(ji);
    qd_inputs_free(in);
}
END_TEST

/* examples/upload_checkpoint.sh uploads the fixture and extracts the tar: the CLI's outputs. */
START_TEST(test_upload_script)
{
    qdp d;
    start(&d, NULL);
    char *cli = cli_outputs("compressed-tensors"), cmd[8192];
    snprintf(cmd, sizeof cmd,
             "QUANTD_URL=%s examples/upload_checkpoint.sh -l compressed-tensors int8 %s %s/got "
             ">/dev/null && diff -r %s/out %s/got",
             d.base, SHARDED, cli, cli, cli);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd,
             "QUANTD_URL=%s examples/upload_checkpoint.sh nope %s %s/x 2>/dev/null", d.base,
             SHARDED, cli);
    int rc = system(cmd);
    ck_assert_int_eq(WEXITSTATUS(rc), 1);
    kit_rmtree(cli);
    free(cli);
    qdp_stop(&d);
}
END_TEST

Suite *suite_inputs(void)
{
    Suite *s = suite_create("inputs");
    TCase *tc = tcase_create("inputs");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_roundtrip_native);
    tcase_add_test(tc, test_roundtrip_compressed_tensors);
    tcase_add_test(tc, test_cut_uploads);
    tcase_add_test(tc, test_quantizes_while_receiving);
    tcase_add_test(tc, test_shard_post_cut);
    tcase_add_test(tc, test_shard_post_streams);
    tcase_add_test(tc, test_bad_inputs);
    tcase_add_test(tc, test_input_timeout);
    tcase_add_test(tc, test_create_checks);
    tcase_add_test(tc, test_upload_script);
    tcase_add_test(tc, test_whole_before_synced);
    suite_add_tcase(s, tc);
    return s;
}
