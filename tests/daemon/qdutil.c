/* qdutil.c -- temporary directories, big sparse checkpoints and the clock for the daemon tests.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* A safetensors file of n F32 tensors [rows, 4096] holding zeros, written sparse (instant). */
void qdt_make_big(const char *path, int n, long rows)
{
    char header[4096];
    size_t at = 0;
    long long off = 0, size = (long long)rows * 4096 * 4;
    at += (size_t)snprintf(header + at, sizeof header - at, "{");
    for (int i = 0; i < n; i++, off += size)
        at += (size_t)snprintf(header + at, sizeof header - at,
                               "%s\"layers.%d.proj.weight\":{\"dtype\":\"F32\",\"shape\":[%ld,"
                               "4096],\"data_offsets\":[%lld,%lld]}",
                               i ? "," : "", i, rows, off, off + size);
    at += (size_t)snprintf(header + at, sizeof header - at, "}");
    while (at % 8) header[at++] = ' ';
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    unsigned long long len = at;
    for (int i = 0; i < 8; i++) fputc((int)((len >> (8 * i)) & 0xff), f);
    ck_assert_uint_eq(fwrite(header, 1, at, f), at);
    ck_assert_int_eq(fflush(f), 0);
    ck_assert_int_eq(ftruncate(fileno(f), (off_t)(8 + at + (size_t)off)), 0);
    fclose(f);
}

void qdt_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

double qdt_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
