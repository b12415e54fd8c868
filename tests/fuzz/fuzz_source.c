/* fuzz_source.c -- libFuzzer harness of the server-side checkpoint paths of jobs (fsutil.c):
 * qd_source_locate(), which checks a client's source.path against the source roots and opens
 * the root's parent directory, and qd_scrub_paths(), which takes server paths out of messages
 * clients read. The roots live in a temporary directory made once: D/models/llama, D/data,
 * D/a/b/c, D/gone/root (whose parent does not exist), D/data/inner (inside another root) and
 * "/". Input: byte 0 picks which roots are configured (one bit each, in that order), the rest
 * up to a NUL is the path, and what follows the NUL is a message to scrub; an '@' in either
 * stands for D, so inputs do not depend on where D is.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700 /* strndup, mkdir */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "fuzz.h"

#define N_ROOTS 6

static char roots[N_ROOTS][4200];

static void make_dir(const char *dir, const char *rel)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FUZZ_CHECK(mkdir(path, 0700) == 0);
}

static void init(void)
{
    if (roots[0][0]) return;
    const char *d = fuzz_tmpdir();
    FUZZ_CHECK(d);
    static const char *const dirs[] = {"models", "models/llama", "data", "data/inner",
                                       "a",      "a/b",          "a/b/c"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) make_dir(d, dirs[i]);
    static const char *const rel[N_ROOTS] = {"/models/llama", "/data",       "/a/b/c",
                                             "/gone/root",    "/data/inner", NULL};
    for (int i = 0; i < N_ROOTS; i++)
        snprintf(roots[i], sizeof roots[i], "%s%s", rel[i] ? d : "/", rel[i] ? rel[i] : "");
}

/* s with every '@' replaced by the temporary directory (malloc'd). */
static char *expand(const char *s)
{
    const char *d = fuzz_tmpdir();
    size_t n = 0, dl = strlen(d);
    for (const char *p = s; *p; p++) n += *p == '@' ? dl : 1;
    char *out = malloc(n + 1), *o = out;
    FUZZ_CHECK(out);
    for (const char *p = s; *p; p++) {
        if (*p == '@') {
            memcpy(o, d, dl);
            o += dl;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return out;
}

/* A located path: the descriptor is open, rel names the path below the root's parent and
 * starts with the root's own name, and parent + "/" + rel is the normalized path. */
static void check_located(const char *root, int dir_fd, const char *rel, const char *norm)
{
    FUZZ_CHECK(dir_fd >= 0 && rel && norm);
    FUZZ_CHECK(rel[0] && rel[0] != '/' && !strstr(rel, "//") && rel[strlen(rel) - 1] != '/');
    FUZZ_CHECK(norm[0] == '/');
    size_t parent_len = (size_t)(strrchr(root, '/') - root);
    char *want = malloc(parent_len + strlen(rel) + 2);
    FUZZ_CHECK(want);
    snprintf(want, parent_len + strlen(rel) + 2, "%.*s/%s", (int)parent_len, root, rel);
    FUZZ_CHECK(strcmp(want, norm) == 0);
    if (strcmp(root, "/") != 0) {
        const char *base = strrchr(root, '/') + 1;
        size_t bl = strlen(base);
        FUZZ_CHECK(strncmp(rel, base, bl) == 0 && (rel[bl] == '/' || rel[bl] == '\0'));
    }
    free(want);
    struct stat st;
    FUZZ_CHECK(fstat(dir_fd, &st) == 0 && S_ISDIR(st.st_mode));
}

static void locate(const char *path, unsigned mask)
{
    char *list[N_ROOTS];
    int n = 0;
    for (int i = 0; i < N_ROOTS; i++)
        if (mask & (1u << i)) list[n++] = roots[i];
    int dir_fd = 7;
    char *rel = (char *)1, *norm = (char *)1;
    qd_err err = {{0}};
    qd_status st = qd_source_locate(path, list, n, &dir_fd, &rel, &norm, &err);
    if (st != QD_OK) {
        FUZZ_CHECK(st == QD_INVALID || st == QD_NOMEM);
        FUZZ_CHECK(dir_fd == -1 && !rel && !norm && err.message[0]);
        return;
    }
    /* the first root the path lies under is the one used */
    const char *root = NULL;
    for (int i = 0; i < n && !root; i++) {
        size_t k = strlen(list[i]);
        if (strcmp(list[i], "/") == 0 ||
            (strncmp(norm, list[i], k) == 0 && (norm[k] == '/' || norm[k] == '\0')))
            root = list[i];
    }
    FUZZ_CHECK(root);
    check_located(root, dir_fd, rel, norm);
    close(dir_fd);
    free(rel);
    free(norm);
    /* without norm */
    st = qd_source_locate(path, list, n, &dir_fd, &rel, NULL, &err);
    FUZZ_CHECK(st == QD_OK && dir_fd >= 0 && rel);
    close(dir_fd);
    free(rel);
}

static void scrub(const char *msg, const char *path)
{
    const char *paths[N_ROOTS + 3];
    size_t n = 0;
    for (int i = 0; i < N_ROOTS; i++) paths[n++] = roots[i];
    paths[n++] = NULL; /* tolerated */
    paths[n++] = path;
    paths[n++] = "/srv/var/";
    static const size_t sizes[] = {1, 2, 8, 9, 64, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *out = malloc(sizes[i]);
        FUZZ_CHECK(out);
        qd_scrub_paths(msg, paths, n, out, sizes[i]);
        FUZZ_CHECK(memchr(out, '\0', sizes[i]));
        free(out);
    }
    /* no paths: the message as it is, as far as it fits */
    size_t len = strlen(msg);
    char *out = malloc(len + 1);
    FUZZ_CHECK(out);
    qd_scrub_paths(msg, paths, 0, out, len + 1);
    FUZZ_CHECK(strcmp(out, msg) == 0);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init();
    if (size == 0) return 0;
    char *text = fuzz_strndup(data + 1, size - 1);
    FUZZ_CHECK(text);
    char *path = expand(text);
    size_t plen = strlen(text);
    char *msg = expand(plen + 1 < size - 1 ? text + plen + 1 : "");
    locate(path, data[0]);
    scrub(msg, path);
    free(msg);
    free(path);
    free(text);
    return 0;
}
