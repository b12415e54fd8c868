/* files.c -- small-file helpers of the checkpoint driver: whole reads of bounded size and copies
 * of input files (opened under the input directory by ck_open_in; an input still arriving is
 * waited for whole before it is opened), directory streams over a
 * descriptor, atomic writes (a locked temporary file beside the target, fsync, rename over
 * nothing or a regular file only, fsync of the directory), each optionally hashed (SHA-256) from
 * the bytes it writes, and removal of a directory tree this process created.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_internal.h"

const char *ck_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static quant_ck_status io_fail(quant_ck_error *err, const char *what, const char *path)
{
    return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s: %s", path, what, strerror(errno));
}

/* With inputs still arriving (d->wait), waits for the whole of `name`; errors name it. */
static quant_ck_status wait_whole_in(const ck_dir *d, const char *name, quant_ck_error *err)
{
    if (!d->wait) return QUANT_CK_OK;
    quant_ck_status st = ck_wait_input(d->wait, name, QUANT_INPUT_WHOLE, NULL, err);
    if (st == QUANT_CK_OK || st == QUANT_CK_ERR_CANCELLED) return st; /* "cancelled" as is */
    if (d->shown)
        quant_ck_prefix(err, "%s/%s", d->shown, name);
    else
        quant_ck_prefix(err, "%s", name);
    return st;
}

quant_ck_status ck_read_small_in(const ck_dir *d, const char *name, size_t max, char **out,
                                 size_t *len, quant_ck_error *err)
{
    int fd;
    struct stat sb;
    quant_ck_status st = wait_whole_in(d, name, err);
    if (st == QUANT_CK_OK) st = ck_open_in(d, name, CK_KIND_REG, &fd, &sb, err);
    if (st != QUANT_CK_OK) return st;
    if ((uint64_t)sb.st_size > max) {
        close(fd);
        char what[64];
        snprintf(what, sizeof what, "larger than %zu bytes", max);
        return ck_fail_in(err, QUANT_CK_ERR_FORMAT, d, name, what);
    }
    size_t n = (size_t)sb.st_size, got = 0;
    char *buf = malloc(n + 1);
    while (buf && got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (!buf) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (got != n) {
        free(buf);
        return ck_fail_in(err, QUANT_CK_ERR_IO, d, name, "short read");
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return QUANT_CK_OK;
}

DIR *ck_opendir_fd(int fd)
{
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d && dup_fd >= 0) {
        int e = errno;
        close(dup_fd);
        errno = e;
    }
    if (d) rewinddir(d); /* the duplicate shares its offset with `fd` */
    return d;
}

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

void ck_fsync_parent(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    size_t n = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof dir) return;
    memcpy(dir, !slash ? "." : path, n);
    dir[n] = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

quant_ck_status ck_write_file_atomic(const char *path, const void *data, size_t len,
                                     quant_ck_error *err)
{
    return ck_write_file_atomic_sha(path, data, len, NULL, err);
}

quant_ck_status ck_write_file_atomic_sha(const char *path, const void *data, size_t len,
                                         char *sha256, quant_ck_error *err)
{
    char *tmp = NULL;
    int fd;
    quant_ck_status st = ck_check_target(path, CK_TARGET_FILE, err);
    if (st == QUANT_CK_OK) st = ck_temp_file(path, &tmp, &fd, err);
    if (st != QUANT_CK_OK) return st;
    if (fchmod(fd, 0644) != 0 || !write_all(fd, data, len) || fsync(fd) != 0)
        st = io_fail(err, "cannot write", path);
    if (st == QUANT_CK_OK) st = ck_publish(tmp, path, CK_TARGET_FILE, err);
    if (st != QUANT_CK_OK) unlink(tmp);
    close(fd); /* after the rename: the lock lives as long as the temporary's name */
    if (st == QUANT_CK_OK) ck_fsync_parent(path);
    free(tmp);
    if (st == QUANT_CK_OK && sha256) {
        struct sha256_ctx ctx;
        sha256_init(&ctx);
        sha256_update(&ctx, len, data);
        ck_sha256_hex(&ctx, sha256);
    }
    return st;
}

quant_ck_status ck_copy_in(const ck_dir *d, const char *name, const char *to, quant_ck_error *err)
{
    return ck_copy_in_sha(d, name, to, NULL, NULL, err);
}

quant_ck_status ck_copy_in_sha(const ck_dir *d, const char *name, const char *to, char *sha256,
                               uint64_t *bytes, quant_ck_error *err)
{
    int in;
    struct stat sb;
    quant_ck_status st = wait_whole_in(d, name, err);
    if (st == QUANT_CK_OK) st = ck_open_in(d, name, CK_KIND_REG, &in, &sb, err);
    if (st != QUANT_CK_OK) return st;
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, sb.st_mode & 0777);
    if (out < 0) {
        close(in);
        return io_fail(err, "cannot create", to);
    }
    char buf[65536];
    ssize_t k;
    bool ok = true;
    uint64_t total = 0;
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    while (ok && ((k = read(in, buf, sizeof buf)) != 0)) {
        if (k < 0 && errno == EINTR) continue;
        ok = k > 0 && write_all(out, buf, (size_t)k);
        if (ok && sha256) sha256_update(&ctx, (size_t)k, (const uint8_t *)buf);
        if (ok) total += (uint64_t)k;
    }
    ok = fsync(out) == 0 && ok;
    ok = close(out) == 0 && ok;
    close(in);
    if (ok && sha256) ck_sha256_hex(&ctx, sha256);
    if (ok && bytes) *bytes = total;
    return ok ? QUANT_CK_OK : io_fail(err, "cannot copy to", to);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void ck_remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
