/* test_sources.c -- server-side checkpoints stay under their source root, through the real
 * quantd: links in a source directory (to a file, a directory, /proc/self/environ, quantd's own
 * database) refuse the job (422, planned before it is accepted) naming the entry; a link as the
 * path itself or on the way to it is refused at request time; paths outside the roots get one
 * answer whether they exist or not; a link swapped in after the job was accepted fails the job
 * naming it and publishes nothing; no error shows a server path. SPDX-License-Identifier:
 * Apache-2.0
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"

#define SHARDED "tests/data/stories260K-bf16-sharded"
#define RULES   "{\"rules\":[{\"module_path\":\".*proj\",\"weight_qtype\":\"int8\"}]}"
#define LINKMSG "a symbolic link (quantd does not follow links)"

typedef struct src_fixture {
    qdp d;
    char *src; /* the source root */
} src_fixture;

/* A copy of the fixture checkpoint as root/stories. */
static void copy_fixture(const char *root)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp -r %s %s/stories", SHARDED, root);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
}

static void start(src_fixture *f, const char *workers)
{
    f->src = qdt_tmpdir();
    copy_fixture(f->src);
    qdp_start(&f->d, (const char *[]){"--source-root", f->src, "--workers", workers, NULL});
    qdp_resp r =
        qdp_req(&f->d, "PUT", "/v1/rulesets/int8", "application/json", RULES, strlen(RULES), NULL);
    ck_assert_int_lt(r.status, 300);
    qdp_resp_free(&r);
}

static void stop(src_fixture *f)
{
    qdp_stop(&f->d);
    kit_rmtree(f->src);
    free(f->src);
}

/* POST a job on path (under the root when rel); returns the response. */
static qdp_resp post(src_fixture *f, const char *path, bool rel)
{
    char body[8192];
    snprintf(body, sizeof body, "{\"ruleset\":\"int8\",\"source\":{\"path\":\"%s%s%s\"}}",
             rel ? f->src : "", rel ? "/" : "", path);
    return qdp_req(&f->d, "POST", "/v1/jobs", "application/json", body, strlen(body), NULL);
}

static long long accepted(src_fixture *f, const char *rel)
{
    qdp_resp r = post(f, rel, true);
    ck_assert_msg(r.status == 202, "%s: %ld %s", rel, r.status, r.body);
    json_t *j = qdp_json(&r);
    long long id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    qdp_resp_free(&r);
    return id;
}

/* The job fails naming `entry` (root-relative); no output, no server path in the error. */
static void fails_naming(src_fixture *f, long long id, const char *entry)
{
    json_t *j = qdp_wait_job(&f->d, id, 60);
    const char *state = json_string_value(json_object_get(j, "state"));
    const char *error = json_string_value(json_object_get(j, "error"));
    ck_assert_msg(strcmp(state, "failed") == 0, "job %lld is %s", id, state);
    char want[512];
    snprintf(want, sizeof want, "%s: %s", entry, LINKMSG);
    ck_assert_msg(error && strstr(error, want), "error '%s' lacks '%s'", error, want);
    ck_assert_msg(!strstr(error, f->src) && !strstr(error, f->d.data_dir), "server path: %s",
                  error);
    ck_assert_ptr_null(json_object_get(j, "outputs"));
    json_decref(j);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/jobs/%lld", f->d.data_dir, id);
    ck_assert_msg(access(dir, F_OK) != 0, "%s left behind", dir);
}

/* A job on rel is refused at once (422 bad_source) naming `entry`, with no server path. */
static void refused_naming(src_fixture *f, const char *rel, const char *entry)
{
    qdp_resp r = post(f, rel, true);
    char want[512];
    snprintf(want, sizeof want, "%s: %s", entry, LINKMSG);
    ck_assert_msg(r.status == 422 && strstr(r.body, "\"bad_source\"") && strstr(r.body, want),
                  "%s: %ld %s (wanted 422 naming %s)", rel, r.status, r.body, entry);
    ck_assert_msg(!strstr(r.body, f->src) && !strstr(r.body, f->d.data_dir), "server path: %s",
                  r.body);
    qdp_resp_free(&r);
}

START_TEST(test_links_in_source_dir)
{
    src_fixture f;
    start(&f, "1");
    static const struct {
        const char *target, *name;
    } links[] = {{"/etc/passwd", "config.json"},
                 {"/proc/self/environ", "tokenizer.json"},
                 {NULL, "stolen.db"}, /* -> quantd's own database */
                 {"/etc", "extra"},
                 {"model-00001-of-00002.safetensors", "copy.safetensors"}}; /* even inside */
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        char *dir = kit_join(f.src, "stories"), *link = kit_join(dir, links[i].name);
        char *db = kit_join(f.d.data_dir, "quantd.db");
        unlink(link);
        ck_assert_int_eq(symlink(links[i].target ? links[i].target : db, link), 0);
        char entry[128];
        snprintf(entry, sizeof entry, "stories/%s", links[i].name);
        refused_naming(&f, "stories", entry); /* planned before it is accepted */
        ck_assert_int_eq(unlink(link), 0);
        free(db);
        free(link);
        free(dir);
    }
    /* a shard that is a link, with the index naming it */
    char *shard = kit_join(f.src, "stories/model-00002-of-00002.safetensors");
    char *moved = kit_join(f.src, "elsewhere.safetensors");
    ck_assert_int_eq(rename(shard, moved), 0);
    ck_assert_int_eq(symlink(moved, shard), 0);
    refused_naming(&f, "stories", "stories/model-00002-of-00002.safetensors");
    /* and the plain directory still works once the link is gone */
    ck_assert_int_eq(unlink(shard), 0);
    ck_assert_int_eq(rename(moved, shard), 0);
    json_t *j = qdp_wait_job(&f.d, accepted(&f, "stories"), 60);
    ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "succeeded");
    json_decref(j);
    free(shard);
    free(moved);
    stop(&f);
}
END_TEST

/* A link as the path or on the way to it: 422 naming it, before any job exists. */
START_TEST(test_link_on_the_path)
{
    src_fixture f;
    start(&f, "1");
    char *a = kit_join(f.src, "alias"), *b = kit_join(f.src, "d");
    char *stories = kit_join(f.src, "stories");
    ck_assert_int_eq(symlink(stories, a), 0);
    ck_assert_int_eq(mkdir(b, 0755), 0);
    char *inner = kit_join(b, "in");
    ck_assert_int_eq(symlink("/etc", inner), 0);
    static const struct {
        const char *path, *named;
    } cases[] = {{"alias", "alias"},
                 {"alias/config.json", "alias"},
                 {"d/in/passwd", "d/in"},
                 {"stories/model-00001-of-00002.safetensors/x", NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qdp_resp r = post(&f, cases[i].path, true);
        ck_assert_msg(r.status == 422 && strstr(r.body, "bad_source"), "%s: %ld %s", cases[i].path,
                      r.status, r.body);
        if (cases[i].named) {
            char want[256];
            const char *base = strrchr(f.src, '/') + 1;
            snprintf(want, sizeof want, "%s/%s: %s", base, cases[i].named, LINKMSG);
            ck_assert_msg(strstr(r.body, want), "%s: %s lacks %s", cases[i].path, r.body, want);
        }
        ck_assert_msg(!strstr(r.body, f.d.data_dir), "%s", r.body);
        qdp_resp_free(&r);
    }
    free(a);
    free(b);
    free(inner);
    free(stories);
    stop(&f);
}
END_TEST

/* Outside the roots: one answer, whether the path exists or not. */
START_TEST(test_outside_is_uniform)
{
    src_fixture f;
    start(&f, "1");
    static const char *const outside[] = {"/etc/passwd", "/nonexistent/passwd", "/etc",
                                          "/no/such/dir"};
    char *first = NULL;
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
        qdp_resp r = post(&f, outside[i], false);
        ck_assert_msg(r.status == 403, "%s: %ld %s", outside[i], r.status, r.body);
        json_t *j = qdp_json(&r);
        const char *msg =
            json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        if (!first) first = strdup(msg);
        ck_assert_str_eq(msg, first);
        json_decref(j);
        qdp_resp_free(&r);
    }
    free(first);
    /* not plain, or relative: 403 too (decided on the text) */
    char body[4096];
    snprintf(body, sizeof body, "%s/stories/../../etc", f.src);
    qdp_resp r = post(&f, body, false);
    ck_assert_int_eq(r.status, 403);
    qdp_resp_free(&r);
    r = post(&f, "stories", false);
    ck_assert_int_eq(r.status, 403);
    qdp_resp_free(&r);
    /* a NUL inside the JSON string is refused, not cut */
    const char *nul = "{\"ruleset\":\"int8\",\"source\":{\"path\":\"/etc\\u0000x\"}}";
    r = qdp_req(&f.d, "POST", "/v1/jobs", "application/json", nul, strlen(nul), NULL);
    ck_assert_int_eq(r.status, 400);
    qdp_resp_free(&r);
    stop(&f);
}
END_TEST

/* A link swapped in after the job was accepted (while it waited in the queue) is refused when
 * it runs. */
START_TEST(test_link_swapped_in_later)
{
    src_fixture f;
    setenv("QUANTD_QUANT_THREADS", "1", 1);
    start(&f, "1");
    unsetenv("QUANTD_QUANT_THREADS");
    char *big = kit_join(f.src, "big.safetensors");
    qdt_make_big(big, 8, 8192);
    long long first = accepted(&f, "big.safetensors");
    json_decref(qdp_wait_state(&f.d, first, "running", 30));
    long long id = accepted(&f, "stories");
    char *cfg = kit_join(f.src, "stories/config.json");
    ck_assert_int_eq(unlink(cfg), 0);
    ck_assert_int_eq(symlink("/etc/passwd", cfg), 0);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", first);
    qdp_resp r = qdp_req(&f.d, "DELETE", path, NULL, NULL, 0, NULL);
    qdp_resp_free(&r);
    fails_naming(&f, id, "stories/config.json");
    free(cfg);
    free(big);
    stop(&f);
}
END_TEST

Suite *suite_sources(void)
{
    Suite *s = suite_create("sources");
    TCase *tc = tcase_create("sources");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_links_in_source_dir);
    tcase_add_test(tc, test_link_on_the_path);
    tcase_add_test(tc, test_outside_is_uniform);
    tcase_add_test(tc, test_link_swapped_in_later);
    suite_add_tcase(s, tc);
    return s;
}
