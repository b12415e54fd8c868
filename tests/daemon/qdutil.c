/* qdutil.c -- temporary directories for the daemon tests.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdtest.h"

char *qdt_tmpdir(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *path = malloc(strlen(base) + 32);
    ck_assert_ptr_nonnull(path);
    sprintf(path, "%s/quantd-test-XXXXXX", base);
    ck_assert_ptr_nonnull(mkdtemp(path));
    return path;
}

void qdt_rmtree(const char *path)
{
    char *cmd = malloc(strlen(path) + 16);
    ck_assert_ptr_nonnull(cmd);
    sprintf(cmd, "rm -rf '%s'", path);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
}

char *qdt_join(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    ck_assert_ptr_nonnull(p);
    sprintf(p, "%s/%s", dir, name);
    return p;
}
