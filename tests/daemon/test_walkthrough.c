/* test_walkthrough.c -- the walkthrough suite: the README's quick-start walk-through, taken
 * verbatim from README.md (the ```sh block after the "<!-- walk-through" marker), run twice in a
 * row against a real quantd on an ephemeral port with a fresh data directory, each run in a fresh
 * bash with only PATH, HOME and QUANTD_URL set, in a scratch directory whose tests/ and
 * build/bin/quant lead to the source tree's fixture and $QUANT_BIN. Each run must exit 0, print
 * nothing on stderr (the block shows every error there), see its own job succeed, print the
 * outputs, `quant inspect` of the extracted shard and the report, and leave the checkpoint
 * directory extracted: a README edit that breaks the block fails here.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qdproc.h"
#include "qdtest.h"

#define README "README.md"
#define MARKER "<!-- walk-through"
#define SHARDS "tests/data/stories260K-bf16-sharded"

/* The block after the marker line: from the line after "```sh" to the closing "```", malloc'd;
 * fails the test when the marker or either fence is missing. */
static char *extract_block(void)
{
    char *readme = qdt_read_file(README, NULL);
    const char *m = strstr(readme, MARKER);
    ck_assert_msg(m != NULL, "%s has no '%s' marker before the walk-through", README, MARKER);
    const char *open = strstr(m, "\n```sh\n");
    ck_assert_msg(open != NULL, "%s: no ```sh block after the walk-through marker", README);
    const char *body = open + strlen("\n```sh\n");
    const char *close = strstr(body, "\n```\n");
    ck_assert_msg(close != NULL, "%s: the walk-through block is not closed", README);
    char *block = strndup(body, (size_t)(close - body) + 1);
    ck_assert_ptr_nonnull(block);
    free(readme);
    return block;
}

/* The scratch directory the block runs in: walkthrough.sh, tests -> the tree's tests/, and
 * build/bin/quant -> $QUANT_BIN (absolute paths). */
static char *make_scratch(const char *block)
{
    char *dir = qdt_tmpdir();
    char *script = kit_join(dir, "walkthrough.sh");
    ck_assert_int_eq(kit_write_file(script, block, strlen(block)), 0);
    char here[PATH_MAX], bin[PATH_MAX];
    ck_assert_ptr_nonnull(realpath("tests", here));
    const char *qb = getenv("QUANT_BIN") ? getenv("QUANT_BIN") : "build/bin/quant";
    ck_assert_msg(realpath(qb, bin) != NULL, "no quant binary at %s", qb);
    char *tests = kit_join(dir, "tests"), *build = kit_join(dir, "build");
    char *bindir = kit_join(build, "bin"), *quant = kit_join(bindir, "quant");
    ck_assert_int_eq(symlink(here, tests), 0);
    ck_assert_int_eq(mkdir(build, 0755), 0);
    ck_assert_int_eq(mkdir(bindir, 0755), 0);
    ck_assert_int_eq(symlink(bin, quant), 0);
    free(script);
    free(tests);
    free(build);
    free(bindir);
    free(quant);
    return dir;
}

/* Runs `bash --norc --noprofile walkthrough.sh` in dir with QUANTD_URL=url; *out and *err get
 * its stdout and stderr (malloc'd). Returns the exit status, or 128 + the signal. */
static int run_block(const char *dir, const char *url, char **out, char **err)
{
    char *o = kit_join(dir, "stdout"), *e = kit_join(dir, "stderr");
    const char *path = getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin";
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (chdir(dir) != 0 || !freopen(o, "w", stdout) || !freopen(e, "w", stderr)) _exit(126);
        char penv[4096], uenv[256], henv[PATH_MAX + 8];
        snprintf(penv, sizeof penv, "PATH=%s", path);
        snprintf(uenv, sizeof uenv, "QUANTD_URL=%s", url);
        snprintf(henv, sizeof henv, "HOME=%s", dir);
        char *const envp[] = {penv, uenv, henv, NULL};
        char *const argv[] = {"bash", "--norc", "--noprofile", "walkthrough.sh", NULL};
        execvpe("bash", argv, envp);
        _exit(127);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    *out = qdt_read_file(o, NULL);
    *err = qdt_read_file(e, NULL);
    free(o);
    free(e);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* What one run must have printed and left behind for job `id`. */
static void check_run(const char *dir, int run, long long id, const char *out, const char *err,
                      int status)
{
    ck_assert_msg(status == 0, "run %d exited %d; stderr:\n%s\nstdout:\n%s", run, status, err, out);
    ck_assert_msg(err[0] == '\0', "run %d printed errors:\n%s", run, err);
    char want[64];
    snprintf(want, sizeof want, "job %lld: succeeded\n", id);
    ck_assert_msg(strstr(out, want) != NULL, "run %d: no '%s' in:\n%s", run, want, out);
    snprintf(want, sizeof want, "{\"job\":%lld,\"outputs\":[", id);
    ck_assert_msg(strstr(out, want) != NULL, "run %d: no outputs list of job %lld", run, id);
    ck_assert_msg(strstr(out, "layout: compressed-tensors, 21 quantized weights") != NULL,
                  "run %d: no `quant inspect` of the extracted shard in:\n%s", run, out);
    ck_assert_msg(strstr(out, "\"quantized\": 35") != NULL, "run %d: no report", run);
    const char *files[] = {"config.json", "model.safetensors.index.json",
                           "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[PATH_MAX];
        struct stat st;
        snprintf(path, sizeof path, "%s/model/%s", dir, files[i]);
        ck_assert_msg(stat(path, &st) == 0 && st.st_size > 0, "run %d: %s not extracted", run,
                      path);
    }
    snprintf(want, sizeof want, "%s/model.tar", dir);
    ck_assert_msg(access(want, F_OK) != 0, "run %d left model.tar behind", run);
}

START_TEST(walkthrough_twice)
{
    ck_assert_msg(access(SHARDS, R_OK) == 0, "the fixture %s is missing", SHARDS);
    char *block = extract_block();
    ck_assert_msg(strstr(block, "${QUANTD_URL:-") != NULL,
                  "the walk-through must take its server from $QUANTD_URL");
    char *dir = make_scratch(block);
    qdp d;
    qdp_start(&d, NULL);
    for (int run = 1; run <= 2; run++) {
        char *out = NULL, *err = NULL;
        int status = run_block(dir, d.base, &out, &err);
        check_run(dir, run, run, out, err, status);
        json_t *job = qdp_get_job(&d, run);
        ck_assert_str_eq(json_string_value(json_object_get(job, "state")), "succeeded");
        json_decref(job);
        free(out);
        free(err);
    }
    qdp_stop(&d);
    kit_rmtree(dir);
    free(dir);
    free(block);
}
END_TEST

Suite *suite_walkthrough(void)
{
    Suite *s = suite_create("walkthrough");
    TCase *tc = tcase_create("readme");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, walkthrough_twice);
    suite_add_tcase(s, tc);
    return s;
}
