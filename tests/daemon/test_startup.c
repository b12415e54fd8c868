/* test_startup.c -- the start-up sweep of the data directory against the real quantd: entries a
 * crash can leave in DATA/uploads and DATA/jobs (no job owns them, or their job's state says they
 * should be gone) are planted on a stopped server's data directory, with the rows that own them
 * written straight into its database; after a restart each is removed (one log line each) or left
 * as specified, symbolic links are removed without touching what they point to, names quantd
 * never gives are logged and left, and live jobs' files are untouched. And what `make run`
 * installs before it starts quantd: the build's libraries, not the test tools.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"

#define SHARD      "tests/data/stories260K-bf16-sharded/model-00001-of-00002.safetensors"
#define RULES      "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}"
#define HEX_ORPHAN "0123456789abcdef0123456789abcdef"
#define HEX_FAILED "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HEX_QUEUED "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HEX_LINK   "cccccccccccccccccccccccccccccccc"

/* ---- the stopped server's database and data directory -----------------------------------------
 */

static sqlite3 *open_db(const qdp *d)
{
    char *path = kit_join(d->data_dir, "quantd.db");
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    free(path);
    return db;
}

/* Runs one statement (printf-style SQL); returns the last inserted row id. */
static long long sql(sqlite3 *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static long long sql(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = NULL;
    ck_assert_int_ge(vasprintf(&text, fmt, ap), 0);
    va_end(ap);
    char *msg = NULL;
    int rc = sqlite3_exec(db, text, NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "%s: %s", text, msg ? msg : "?");
    free(text);
    return (long long)sqlite3_last_insert_rowid(db);
}

/* The source_path of job id, malloc'd. */
static char *source_path(sqlite3 *db, long long id)
{
    sqlite3_stmt *st = NULL;
    ck_assert_int_eq(
        sqlite3_prepare_v2(db, "SELECT source_path FROM jobs WHERE id = ?1", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_int64(st, 1, id);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    char *p = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return p;
}

/* DATA/REL, malloc'd. */
static char *data_path(const qdp *d, const char *rel)
{
    return kit_join(d->data_dir, rel);
}

static void make_dir(const char *path)
{
    ck_assert_msg(mkdir(path, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
}

/* DATA/REL as a directory holding a file `name` ("x" in it). */
static void plant_dir(const qdp *d, const char *rel, const char *name)
{
    char *dir = data_path(d, rel), *file = kit_join(dir, name);
    make_dir(dir);
    ck_assert_int_eq(kit_write_file(file, "x", 1), 0);
    free(dir);
    free(file);
}

static void plant_link(const qdp *d, const char *rel, const char *target)
{
    char *link = data_path(d, rel);
    ck_assert_msg(symlink(target, link) == 0, "symlink %s: %s", link, strerror(errno));
    free(link);
}

static bool present(const qdp *d, const char *rel)
{
    char *p = data_path(d, rel);
    struct stat sb;
    bool there = lstat(p, &sb) == 0;
    free(p);
    return there;
}

/* ---- the running server -----------------------------------------------------------------------
 */

static void put_rules(qdp *d)
{
    qdp_resp r =
        qdp_req(d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_msg(r.status == 200 || r.status == 201, "%ld %s", r.status, r.body);
    qdp_resp_free(&r);
}

/* A single-shard upload job run to success; its output's sha256 to sha (65 bytes). */
static long long upload_success(qdp *d, char *sha)
{
    qdp_resp r = qdp_upload(d, "/v1/jobs?ruleset=int8", SHARD);
    ck_assert_msg(r.status == 202, "%ld %s", r.status, r.body);
    json_t *j = qdp_json(&r);
    long long id = (long long)json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    qdp_resp_free(&r);
    j = qdp_wait_job(d, id, 60);
    const char *state = json_string_value(json_object_get(j, "state"));
    ck_assert_msg(strcmp(state, "succeeded") == 0, "job %lld: %s (%s)", id, state,
                  json_string_value(json_object_get(j, "error")));
    json_t *out = json_array_get(json_object_get(j, "outputs"), 0);
    snprintf(sha, 65, "%s", json_string_value(json_object_get(out, "sha256")));
    json_decref(j);
    return id;
}

/* GET of the job's output: its status, and the ETag is "sha" when sha is not NULL. */
static long get_output(qdp *d, long long id, const char *sha)
{
    char path[96], want[80];
    snprintf(path, sizeof path, "/v1/jobs/%lld/output", id);
    qdp_resp r = qdp_req(d, "GET", path, NULL, NULL, 0, NULL);
    long status = r.status;
    if (sha) {
        char *etag = qdp_header(&r, "etag");
        snprintf(want, sizeof want, "\"%s\"", sha);
        ck_assert_msg(etag && strcmp(etag, want) == 0, "%s: ETag %s, wanted %s", path, etag, want);
        free(etag);
    }
    qdp_resp_free(&r);
    return status;
}

/* Lines of quantd's log (root/quantd.log) holding every one of the NULL-terminated needles. */
static int log_lines(const qdp *d, ...)
{
    char *path = kit_join(d->root, "quantd.log");
    char *text = qdt_read_file(path, NULL);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        va_list ap;
        va_start(ap, d);
        bool all = true;
        for (const char *s = va_arg(ap, const char *); s && all; s = va_arg(ap, const char *))
            all = strstr(line, s) != NULL;
        va_end(ap);
        n += all;
    }
    free(text);
    free(path);
    return n;
}

/* ---- the sweep --------------------------------------------------------------------------------
 */

/* What the restart must remove (the entry and the reason its log line gives). */
typedef struct planted {
    char entry[64];
    const char *why;
} planted;

START_TEST(test_sweep)
{
    qdp d;
    const char *args[] = {"--workers", "1", NULL};
    qdp_start(&d, args);
    put_rules(&d);
    char sha[65], sha_b[65];
    long long a = upload_success(&d, sha), b = upload_success(&d, sha_b);
    ck_assert_int_eq(qdp_signal(&d, SIGTERM), 0);

    sqlite3 *db = open_db(&d);
    char *outside = kit_join(d.root, "outside"), *keep = kit_join(outside, "keep.txt");
    make_dir(outside);
    ck_assert_int_eq(kit_write_file(keep, "keep", 4), 0);
    planted gone[10];
    size_t n = 0;
    /* a succeeded job's upload directory back on disk (a crash after the job's end was stored) */
    char *a_src = source_path(db, a), up_a[64];
    snprintf(up_a, sizeof up_a, "uploads/%.32s", strrchr(a_src, '/') - 32);
    plant_dir(&d, up_a, "model.safetensors");
    gone[n++] = (planted){"", "its job succeeded: a finished job's inputs are not kept"};
    snprintf(gone[n - 1].entry, sizeof gone[0].entry, "%s", up_a);
    /* a failed job's inputs (with its receiving mark) and outputs directory */
    long long f = sql(db,
                      "INSERT INTO jobs (state, rules, layout, source_kind, source_path, "
                      "created_ms, error) VALUES ('failed', '%s', 'native', 'upload', "
                      "'%s/uploads/" HEX_FAILED "/inputs', 1, 'planted')",
                      RULES, d.data_dir);
    plant_dir(&d, "uploads/" HEX_FAILED, "receiving");
    plant_dir(&d, "uploads/" HEX_FAILED "/inputs", "model.safetensors");
    gone[n++] =
        (planted){"uploads/" HEX_FAILED, "its job failed: a finished job's inputs are not kept"};
    snprintf(gone[n].entry, sizeof gone[0].entry, "jobs/%lld", f);
    gone[n].why = "its job failed: a failed job has no outputs";
    plant_dir(&d, gone[n++].entry, "partial");
    /* a cancelled job's outputs directory */
    long long c = sql(db,
                      "INSERT INTO jobs (state, rules, layout, source_kind, source_path, "
                      "created_ms) VALUES ('cancelled', '%s', 'native', 'path', '/nowhere', 1)",
                      RULES);
    snprintf(gone[n].entry, sizeof gone[0].entry, "jobs/%lld", c);
    gone[n].why = "its job was cancelled: a cancelled job has no outputs";
    plant_dir(&d, gone[n++].entry, "partial");
    /* retention recorded the removal of b's outputs, the crash came before the files went */
    sql(db, "UPDATE jobs SET outputs_removed_ms = 1 WHERE id = %lld", b);
    snprintf(gone[n].entry, sizeof gone[0].entry, "jobs/%lld", b);
    gone[n++].why = "retention removed its job's outputs";
    /* directories no job owns, and symbolic links named as quantd names its entries */
    plant_dir(&d, "uploads/" HEX_ORPHAN, "model.safetensors");
    gone[n++] = (planted){"uploads/" HEX_ORPHAN, "no job owns it"};
    plant_dir(&d, "jobs/999999", "output");
    gone[n++] = (planted){"jobs/999999", "no job owns it"};
    plant_link(&d, "jobs/888888", outside);
    gone[n++] = (planted){"jobs/888888", "no job owns it"};
    plant_link(&d, "uploads/" HEX_LINK, outside);
    gone[n++] = (planted){"uploads/" HEX_LINK, "no job owns it"};
    /* names quantd never gives */
    const char *unknown[] = {"uploads/README", "jobs/0042", "jobs/lost+found",
                             "uploads/ABCDEF0123456789ABCDEF0123456789"};
    for (size_t i = 0; i < 4; i++) plant_dir(&d, unknown[i], "x");
    /* a queued upload job (a's twin) with its shard in place: it must still run */
    char *q_src = kit_join(d.data_dir, "uploads/" HEX_QUEUED "/model.safetensors");
    long long q = sql(db,
                      "INSERT INTO jobs (state, ruleset, rules, layout, source_kind, source_path, "
                      "created_ms, unused_rules) SELECT 'queued', ruleset, rules, layout, "
                      "'upload', '%s', created_ms, unused_rules FROM jobs WHERE id = %lld",
                      q_src, a);
    char *q_dir = data_path(&d, "uploads/" HEX_QUEUED);
    make_dir(q_dir);
    free(q_dir);
    size_t len = 0;
    void *shard = qdt_read_file(SHARD, &len);
    ck_assert_int_eq(kit_write_file(q_src, shard, len), 0);
    free(shard);
    sqlite3_close(db);

    qdp_restart(&d, args);
    /* done before the first request is served */
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(!present(&d, gone[i].entry), "%s was not removed", gone[i].entry);
        ck_assert_msg(log_lines(&d, "msg=\"start-up sweep: removed\"", "entry=", gone[i].entry,
                                gone[i].why, NULL) == 1,
                      "no single log line for %s (%s)", gone[i].entry, gone[i].why);
    }
    ck_assert_int_eq(log_lines(&d, "start-up sweep: removed", NULL), (int)n);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_msg(present(&d, unknown[i]), "%s was removed", unknown[i]);
        ck_assert_int_eq(log_lines(&d, "start-up sweep: unknown entry", unknown[i], NULL), 1);
    }
    ck_assert_msg(access(keep, F_OK) == 0, "a link's target lost its file");
    ck_assert_int_eq(log_lines(&d, "start-up sweep", "uploads/" HEX_QUEUED, NULL), 0);
    char a_dir[32];
    snprintf(a_dir, sizeof a_dir, "jobs/%lld", a);
    ck_assert(present(&d, a_dir));
    ck_assert_int_eq(get_output(&d, a, sha), 200);
    ck_assert_int_eq(get_output(&d, b, NULL), 410);
    /* the queued job found its upload: the same output as its twin */
    json_t *j = qdp_wait_job(&d, q, 60);
    const char *state = json_string_value(json_object_get(j, "state"));
    ck_assert_msg(strcmp(state, "succeeded") == 0, "queued job %lld: %s (%s)", q, state,
                  json_string_value(json_object_get(j, "error")));
    json_decref(j);
    ck_assert_int_eq(get_output(&d, q, sha), 200);

    /* a second start finds nothing more to remove */
    ck_assert_int_eq(qdp_signal(&d, SIGTERM), 0);
    qdp_restart(&d, args);
    ck_assert_int_eq(log_lines(&d, "start-up sweep: removed", NULL), (int)n);
    ck_assert_int_eq(get_output(&d, a, sha), 200);
    ck_assert_int_eq(get_output(&d, q, sha), 200);
    qdp_stop(&d);
    free(a_src);
    free(q_src);
    free(keep);
    free(outside);
}
END_TEST

/* stdout of the shell command `cmd` (run from the repository root), malloc'd. */
static char *command_output(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    size_t k;
    while ((k = fread(out + n, 1, cap - 1 - n, p)) > 0) n += k;
    out[n] = '\0';
    pclose(p);
    return out;
}

/* `make run` installs what building and starting quantd needs, not the test tools: its
 * prerequisite is deps-run (install-deps --run), whose package list has the libraries and none
 * of Check, curl, clang, valgrind or NumPy. */
START_TEST(test_run_installs_what_it_needs)
{
    char *pkgs = command_output("scripts/install-deps --run --print");
    static const char *const needed[] = {"build-essential",   "libjansson-dev",  "libpcre2-dev",
                                         "libmicrohttpd-dev", "libsqlite3-dev",  "libinih-dev",
                                         "nettle-dev",        "libgnutls28-dev", "libarchive-dev"};
    static const char *const test_only[] = {"check", "clang", "valgrind", "libcurl",
                                            "python3-numpy"};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
        ck_assert_msg(strstr(pkgs, needed[i]), "--run lacks %s: %s", needed[i], pkgs);
    for (size_t i = 0; i < sizeof test_only / sizeof test_only[0]; i++)
        ck_assert_msg(!strstr(pkgs, test_only[i]), "--run installs %s: %s", test_only[i], pkgs);
    free(pkgs);
    /* the full list still has them (make check) */
    pkgs = command_output("scripts/install-deps --print");
    ck_assert_msg(strstr(pkgs, " check ") && strstr(pkgs, "valgrind"), "%s", pkgs);
    free(pkgs);
    char *plan = command_output("make -n run 2>&1 | grep install-deps");
    ck_assert_msg(strstr(plan, "scripts/install-deps --run") && !strstr(plan, "check libcurl"),
                  "make run would run: %s", plan);
    free(plan);
}
END_TEST

Suite *suite_startup(void)
{
    Suite *s = suite_create("startup");
    TCase *tc = tcase_create("sweep");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_sweep);
    tcase_add_test(tc, test_run_installs_what_it_needs);
    suite_add_tcase(s, tc);
    return s;
}
