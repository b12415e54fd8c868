/* qdutil.c -- the daemon tests' temporary directories and big sparse checkpoints, on the test kit.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdtest.h"

char *qdt_tmpdir(void)
{
    char *dir = kit_tmpdir("quantd-test");
    ck_assert_msg(dir != NULL, "cannot make a temporary directory: %s", strerror(errno));
    return dir;
}

void *qdt_read_file(const char *path, size_t *len)
{
    void *p = kit_read_file(path, len);
    ck_assert_msg(p != NULL, "cannot read %s", path);
    return p;
}

void qdt_make_big(const char *path, int n, long rows)
{
    kit_st_tensor *t = calloc((size_t)n, sizeof *t);
    char(*names)[48] = calloc((size_t)n, sizeof *names);
    ck_assert(t != NULL && names != NULL);
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "layers.%d.proj.weight", i);
        t[i] = (kit_st_tensor){.name = names[i],
                               .dtype = "F32",
                               .rank = 2,
                               .shape = {rows, 4096},
                               .nbytes = (size_t)rows * 4096 * 4};
    }
    ck_assert_msg(kit_st_write(path, t, (size_t)n, NULL) == 0, "cannot write %s", path);
    free(names);
    free(t);
}
