/* test_outputs.c -- the outputs suite: a succeeded job's whole checkpoint through the real quantd.
 * GET /v1/jobs/{id}/outputs (names, sizes, SHA-256 and URLs; the tar's size and ETag) and
 * GET /v1/jobs/{id}/outputs.tar for a 2-shard directory job in both layouts: the tar read back
 * with libarchive and extracted with tar(1) gives exactly the listed files, two downloads are
 * byte-identical, HEAD and If-None-Match, 404/409/410, the roles, a client leaving mid-stream,
 * and a file changed on disk cutting the stream.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <archive.h>
#include <archive_entry.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"

#define SHARDED "tests/data/stories260K-bf16-sharded"
#define RULES   "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}"

static void hex_of(const uint8_t *d, char out[65])
{
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void sha256_hex(const void *p, size_t n, char out[65])
{
    struct sha256_ctx c;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    sha256_update(&c, n, p);
    sha256_digest(&c, sizeof d, d);
    hex_of(d, out);
}

/* A copy of the 2-shard fixture under a fresh source root; quantd started on it. */
static char *start_on_fixture(qdp *d, const char *const *more)
{
    char *src = qdt_tmpdir(), cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -r %s %s/stories", SHARDED, src);
    ck_assert_int_eq(system(cmd), 0);
    const char *args[12] = {"--source-root", src};
    size_t n = 2;
    for (size_t i = 0; more && more[i] && n < 11; i++) args[n++] = more[i];
    args[n] = NULL;
    qdp_start(d, args);
    qdp_resp r =
        qdp_req(d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_msg(r.status == 201 || r.status == 200, "PUT ruleset: %ld %s", r.status, r.body);
    qdp_resp_free(&r);
    return src;
}

/* POSTs a job on src/stories (the layout given) and waits for it; returns its JSON. */
static json_t *dir_job(qdp *d, const char *src, const char *layout)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"ruleset\":\"int8\",\"layout\":\"%s\",\"source\":{\"path\":\"%s/stories\"}}",
             layout, src);
    qdp_resp r = qdp_req(d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
    ck_assert_msg(r.status == 202, "POST: %ld %s", r.status, r.body);
    json_t *j = qdp_json(&r);
    long long id = (long long)json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    qdp_resp_free(&r);
    j = qdp_wait_job(d, id, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    return j;
}

static long long id_of(const json_t *job)
{
    return (long long)json_integer_value(json_object_get(job, "id"));
}

/* GET path, which must answer `status`; the response. */
static qdp_resp get(qdp *d, const char *method, const char *path, long status)
{
    qdp_resp r = qdp_req(d, method, path, NULL, NULL, 0, NULL);
    ck_assert_msg(r.status == status, "%s %s: %ld, wanted %ld: %.300s", method, path, r.status,
                  status, r.body);
    return r;
}

/* The error code of a JSON error reply. */
static void expect_code(qdp *d, const char *path, long status, const char *code)
{
    qdp_resp r = get(d, "GET", path, status);
    json_t *doc = qdp_json(&r);
    const char *got = json_string_value(json_object_get(json_object_get(doc, "error"), "code"));
    ck_assert_msg(got && strcmp(got, code) == 0, "%s: %s, wanted %s", path, got ? got : "-", code);
    json_decref(doc);
    qdp_resp_free(&r);
}

/* Seconds since the epoch of an ISO 8601 UTC time ("2026-11-25T00:38:05.132Z"). */
static long long iso_seconds(const char *s)
{
    struct tm tm = {0};
    ck_assert(s && strptime(s, "%Y-%m-%dT%H:%M:%S", &tm));
    return (long long)timegm(&tm);
}

/* Every member of the tar in `buf` against the list: same names in the same order, sizes and
 * SHA-256, regular files of mode 0644 owned by 0:0 modified at `mtime`. */
static void check_members(const char *buf, size_t len, json_t *outputs, long long mtime)
{
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    ck_assert_int_eq(archive_read_open_memory(a, buf, len), ARCHIVE_OK);
    struct archive_entry *e;
    size_t i = 0;
    while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
        json_t *o = json_array_get(outputs, i++);
        ck_assert_msg(o != NULL, "the tar has more members than the list");
        ck_assert_str_eq(archive_entry_pathname(e), json_string_value(json_object_get(o, "name")));
        la_int64_t size = archive_entry_size(e);
        ck_assert_int_eq(size, json_integer_value(json_object_get(o, "bytes")));
        ck_assert_int_eq(archive_entry_filetype(e), AE_IFREG);
        ck_assert_int_eq(archive_entry_perm(e), 0644);
        ck_assert_int_eq(archive_entry_uid(e), 0);
        ck_assert_int_eq(archive_entry_gid(e), 0);
        ck_assert_int_eq((long long)archive_entry_mtime(e), mtime);
        char *data = malloc((size_t)size + 1), hex[65];
        ck_assert_int_eq(archive_read_data(a, data, (size_t)size + 1), size);
        sha256_hex(data, (size_t)size, hex);
        ck_assert_str_eq(hex, json_string_value(json_object_get(o, "sha256")));
        free(data);
    }
    ck_assert_uint_eq(i, json_array_size(outputs));
    archive_read_free(a);
}

/* tar(1) extracts `file` into a fresh directory holding exactly the listed files, each with
 * its listed SHA-256. */
static void check_extracted(const char *file, json_t *outputs)
{
    char *dir = qdt_tmpdir(), cmd[4096];
    snprintf(cmd, sizeof cmd, "tar -x -f %s -C %s", file, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq %zu", dir, json_array_size(outputs));
    ck_assert_msg(system(cmd) == 0, "the extracted directory holds other files than the list");
    size_t i;
    json_t *o;
    json_array_foreach(outputs, i, o)
    {
        char *path = kit_join(dir, json_string_value(json_object_get(o, "name"))), hex[65];
        size_t len;
        char *p = qdt_read_file(path, &len);
        ck_assert_int_eq((long long)len, json_integer_value(json_object_get(o, "bytes")));
        sha256_hex(p, len, hex);
        ck_assert_str_eq(hex, json_string_value(json_object_get(o, "sha256")));
        free(p);
        free(path);
    }
    kit_rmtree(dir);
    free(dir);
}

/* The list, the tar twice (byte-identical), HEAD and If-None-Match of one succeeded job. */
static void check_job_tar(qdp *d, json_t *job, const char *keep_as)
{
    long long id = id_of(job);
    char path[128], tar_path[128];
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs", id);
    snprintf(tar_path, sizeof tar_path, "/v1/jobs/%lld/outputs.tar", id);
    qdp_resp r = get(d, "GET", path, 200);
    json_t *list = qdp_json(&r);
    qdp_resp_free(&r);
    json_t *outputs = json_object_get(list, "outputs"), *tar = json_object_get(list, "tar");
    ck_assert_int_eq(json_integer_value(json_object_get(list, "job")), id);
    ck_assert(json_equal(outputs, json_object_get(job, "outputs"))); /* as the job lists them */
    const char *want[] = {"config.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors", "model.safetensors.index.json"};
    ck_assert_uint_eq(json_array_size(outputs), 4);
    long long total = 0;
    for (size_t i = 0; i < 4; i++) {
        json_t *o = json_array_get(outputs, i);
        ck_assert_str_eq(json_string_value(json_object_get(o, "name")), want[i]);
        total += json_integer_value(json_object_get(o, "bytes"));
    }
    ck_assert_int_eq(json_integer_value(json_object_get(list, "bytes")), total);
    ck_assert_str_eq(json_string_value(json_object_get(tar, "url")), tar_path);
    long long tar_bytes = json_integer_value(json_object_get(tar, "bytes"));
    const char *etag = json_string_value(json_object_get(tar, "etag"));

    qdp_resp a = get(d, "GET", tar_path, 200), b = get(d, "GET", tar_path, 200);
    ck_assert_int_eq((long long)a.len, tar_bytes);
    ck_assert_msg(a.len == b.len && memcmp(a.body, b.body, a.len) == 0,
                  "two downloads of the tar differ");
    char *len = qdp_header(&a, "content-length"), *tag = qdp_header(&a, "etag"),
         *type = qdp_header(&a, "content-type");
    ck_assert_int_eq(atoll(len), tar_bytes);
    ck_assert_str_eq(tag, etag);
    ck_assert_str_eq(type, "application/x-tar");
    check_members(a.body, a.len, outputs,
                  iso_seconds(json_string_value(json_object_get(job, "finished_at"))));
    FILE *f = fopen(keep_as, "wb");
    ck_assert(f && fwrite(a.body, 1, a.len, f) == a.len && fclose(f) == 0);
    check_extracted(keep_as, outputs);
    free(len);
    free(tag);
    free(type);
    qdp_resp_free(&a);
    qdp_resp_free(&b);

    qdp_resp h = get(d, "HEAD", tar_path, 200);
    ck_assert_uint_eq(h.len, 0);
    len = qdp_header(&h, "content-length");
    tag = qdp_header(&h, "etag");
    ck_assert_int_eq(atoll(len), tar_bytes);
    ck_assert_str_eq(tag, etag);
    free(len);
    free(tag);
    qdp_resp_free(&h);
    char inm[160];
    snprintf(inm, sizeof inm, "If-None-Match: %s", etag);
    qdp_resp nm = qdp_req(d, "GET", tar_path, NULL, NULL, 0, inm);
    ck_assert_int_eq(nm.status, 304);
    ck_assert_uint_eq(nm.len, 0);
    qdp_resp_free(&nm);
    json_decref(list);
}

START_TEST(test_tar_of_checkpoint)
{
    qdp d;
    char *src = start_on_fixture(&d, NULL);
    char *keep = qdt_tmpdir(), *file = kit_join(keep, "job.tar");
    json_t *native = dir_job(&d, src, "native"), *ct = dir_job(&d, src, "compressed-tensors");
    check_job_tar(&d, native, file);
    check_job_tar(&d, ct, file);
    /* two jobs, two tars: other bytes, other ETags */
    char p1[64], p2[64];
    snprintf(p1, sizeof p1, "/v1/jobs/%lld/outputs", id_of(native));
    snprintf(p2, sizeof p2, "/v1/jobs/%lld/outputs", id_of(ct));
    qdp_resp r1 = get(&d, "GET", p1, 200), r2 = get(&d, "GET", p2, 200);
    json_t *l1 = qdp_json(&r1), *l2 = qdp_json(&r2);
    ck_assert_str_ne(json_string_value(json_object_get(json_object_get(l1, "tar"), "etag")),
                     json_string_value(json_object_get(json_object_get(l2, "tar"), "etag")));
    json_decref(l1);
    json_decref(l2);
    qdp_resp_free(&r1);
    qdp_resp_free(&r2);
    json_decref(native);
    json_decref(ct);
    qdp_stop(&d);
    kit_rmtree(keep);
    kit_rmtree(src);
    free(file);
    free(keep);
    free(src);
}
END_TEST

/* ---- refusals ---------------------------------------------------------------------------------
 */

START_TEST(test_tar_refusals)
{
    setenv("QUANTD_QUANT_THREADS", "1", 1);
    qdp d;
    char *src = start_on_fixture(&d, (const char *[]){"--keep-outputs", "1", NULL});
    expect_code(&d, "/v1/jobs/999/outputs", 404, "not_found");
    expect_code(&d, "/v1/jobs/999/outputs.tar", 404, "not_found");
    expect_code(&d, "/v1/jobs/01/outputs.tar", 404, "not_found");
    /* a job that has not succeeded: a big one, queued or running, then cancelled */
    char file[4096], body[4200], path[128];
    snprintf(file, sizeof file, "%s/big.safetensors", src);
    qdt_make_big(file, 8, 8192);
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s\"}}", file);
    qdp_resp r = qdp_req(&d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
    ck_assert_int_eq(r.status, 202);
    json_t *j = qdp_json(&r);
    long long big = id_of(j);
    json_decref(j);
    qdp_resp_free(&r);
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs.tar", big);
    expect_code(&d, path, 409, "not_ready");
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs", big);
    expect_code(&d, path, 409, "not_ready");
    snprintf(path, sizeof path, "/v1/jobs/%lld", big);
    qdp_resp_free((qdp_resp[]){qdp_req(&d, "DELETE", path, NULL, NULL, 0, NULL)});
    j = qdp_wait_job(&d, big, 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "cancelled");
    json_decref(j);
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs.tar", big);
    expect_code(&d, path, 409, "not_ready");
    /* keep_outputs 1: the older of two succeeded jobs loses its files -> 410 */
    json_t *first = dir_job(&d, src, "native"), *second = dir_job(&d, src, "native");
    /* polled on the list: a tar requested while retention removes the files would be cut */
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs", id_of(first));
    long status = 0;
    for (int i = 0; i < 100 && status != 410; i++) {
        qdp_resp g = qdp_req(&d, "GET", path, NULL, NULL, 0, NULL);
        status = g.status;
        qdp_resp_free(&g);
        if (status != 410) kit_sleep_ms(100);
    }
    expect_code(&d, path, 410, "outputs_removed");
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs.tar", id_of(first));
    expect_code(&d, path, 410, "outputs_removed");
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs.tar", id_of(second));
    qdp_resp_free((qdp_resp[]){get(&d, "GET", path, 200)});
    json_decref(first);
    json_decref(second);
    qdp_stop(&d);
    unsetenv("QUANTD_QUANT_THREADS");
    kit_rmtree(src);
    free(src);
}
END_TEST

/* `quantd token create` on d's data directory: the token (malloc'd). */
static char *new_token(qdp *d, const char *role, const char *name)
{
    char *out = NULL, *err = NULL;
    int rc = qdp_run(d, &out, &err,
                     (const char *[]){"token", "create", "--role", role, "--name", name, NULL});
    ck_assert_msg(rc == 0, "token create: %d %s", rc, err);
    out[strcspn(out, "\n")] = '\0';
    free(err);
    return out;
}

static long status_as(qdp *d, const char *method, const char *path, const char *token)
{
    d->token = token;
    qdp_resp r = qdp_req(d, method, path, NULL, NULL, 0, NULL);
    d->token = NULL;
    long st = r.status;
    qdp_resp_free(&r);
    return st;
}

START_TEST(test_tar_roles)
{
    qdp d;
    char *src = start_on_fixture(&d, NULL);
    json_t *job = dir_job(&d, src, "native");
    char *op = new_token(&d, "operator", "op"), *rd = new_token(&d, "reader", "rd"),
         *tr = new_token(&d, "trainer", "tr");
    const char *routes[] = {"outputs", "outputs.tar"};
    for (size_t i = 0; i < 2; i++) {
        char path[128];
        snprintf(path, sizeof path, "/v1/jobs/%lld/%s", id_of(job), routes[i]);
        ck_assert_int_eq(status_as(&d, "GET", path, NULL), 401);
        ck_assert_int_eq(status_as(&d, "GET", path, tr), 403);
        ck_assert_int_eq(status_as(&d, "HEAD", path, tr), 403);
        ck_assert_int_eq(status_as(&d, "GET", path, rd), 200);
        ck_assert_int_eq(status_as(&d, "HEAD", path, rd), 200);
        ck_assert_int_eq(status_as(&d, "GET", path, op), 200);
    }
    free(op);
    free(rd);
    free(tr);
    json_decref(job);
    qdp_stop(&d);
    kit_rmtree(src);
    free(src);
}
END_TEST

/* ---- a file changed on disk -------------------------------------------------------------------
 */

/* GET path over a raw connection, read until the server closes: the Content-Length it announced
 * and the body bytes that came. */
static void raw_get(qdp *d, const char *path, long long *announced, long long *got)
{
    int fd = qdp_raw_connect(d);
    char req[256];
    int n =
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    ck_assert(qdp_send_all(fd, req, (size_t)n));
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    ssize_t k;
    while ((k = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)k;
        if (len + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    close(fd);
    buf[len] = '\0';
    char *end = strstr(buf, "\r\n\r\n"), *cl = strcasestr(buf, "\r\ncontent-length:");
    ck_assert(end && cl && cl < end);
    *announced = atoll(cl + strlen("\r\ncontent-length:"));
    *got = (long long)(len - (size_t)(end + 4 - buf));
    free(buf);
}

START_TEST(test_tar_file_changed)
{
    qdp d;
    char *src = start_on_fixture(&d, NULL);
    json_t *job = dir_job(&d, src, "native");
    char path[128], file[4096];
    snprintf(path, sizeof path, "/v1/jobs/%lld/outputs.tar", id_of(job));
    long long announced, got;
    raw_get(&d, path, &announced, &got);
    ck_assert_int_eq(got, announced);
    /* a client that leaves after the first bytes: the stream is dropped, quantd serves on */
    int fd = qdp_raw_connect(&d);
    char req[256], head[1024];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    ck_assert(qdp_send_all(fd, req, (size_t)n));
    ck_assert_int_gt(read(fd, head, sizeof head), 0);
    close(fd);
    raw_get(&d, path, &announced, &got);
    ck_assert_int_eq(got, announced);
    snprintf(file, sizeof file, "%s/jobs/%lld/output/model-00002-of-00002.safetensors", d.data_dir,
             id_of(job));
    ck_assert_int_eq(truncate(file, 1000), 0);
    raw_get(&d, path, &announced, &got);
    ck_assert_msg(got < announced, "a changed file still gave the whole tar (%lld of %lld)", got,
                  announced);
    char *log = kit_join(d.root, "quantd.log");
    size_t len;
    char *text = qdt_read_file(log, &len);
    ck_assert_msg(strstr(text, "msg=\"tar download cut\"") &&
                      strstr(text, "member=model-00002-of-00002.safetensors"),
                  "the cut is not logged");
    free(text);
    free(log);
    json_decref(job);
    qdp_stop(&d);
    kit_rmtree(src);
    free(src);
}
END_TEST

Suite *suite_outputs(void)
{
    Suite *s = suite_create("outputs");
    TCase *tc = tcase_create("outputs");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_tar_of_checkpoint);
    tcase_add_test(tc, test_tar_refusals);
    tcase_add_test(tc, test_tar_roles);
    tcase_add_test(tc, test_tar_file_changed);
    suite_add_tcase(s, tc);
    return s;
}
