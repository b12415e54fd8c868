/* beneath.c -- opening a run's inputs under a directory descriptor: quant_open_beneath() walks a
 * plain relative path one component at a time with O_NOFOLLOW, never through a symbolic link
 * (the confinement quantd asks for with no_symlinks), and ck_open_in(), the one opener of every
 * input file, uses that walker or, when links are followed (the CLI), a single openat(). Either
 * way only a regular file or a directory, as asked, comes back: its type is checked with fstat
 * on the opened descriptor, and O_NONBLOCK while opening means a FIFO never blocks the run.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_internal.h"

/* The open flags quant_open_beneath() accepts besides O_RDONLY. */
#define BENEATH_FLAGS (O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)

/* "shown/rel[0, len): what", or "rel[0, len): what" without a shown name. */
static quant_ck_status fail_at(quant_ck_error *err, quant_ck_status status, const ck_dir *d,
                               const char *rel, size_t len, const char *what)
{
    int n = len > 4096 ? 4096 : (int)len;
    return quant_ck_fail(err, status, "%s%s%.*s: %s", d->shown ? d->shown : "", d->shown ? "/" : "",
                         n, rel, what);
}

quant_ck_status ck_fail_in(quant_ck_error *err, quant_ck_status status, const ck_dir *d,
                           const char *name, const char *what)
{
    return fail_at(err, status, d, name, strlen(name), what);
}

char *ck_shown_name(const ck_dir *d, const char *name)
{
    size_t n = (d->shown ? strlen(d->shown) + 1 : 0) + strlen(name) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s%s", d->shown ? d->shown : "", d->shown ? "/" : "", name);
    return s;
}

bool ck_stat_in(const ck_dir *d, const char *name, struct stat *sb)
{
    return fstatat(d->fd, name, sb, d->nofollow ? AT_SYMLINK_NOFOLLOW : 0) == 0;
}

/* Plain components only: not empty, no leading '/', no empty, "." or ".." component (so no
 * trailing '/' either). */
static bool plain_path(const char *rel)
{
    for (const char *p = rel;; p++) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += n;
        if (!*p) return true;
    }
}

/* After a failed openat(at, comp, ..|O_NOFOLLOW) (errno untouched): a link is refused, anything
 * else is an i/o error with the errno text. rel[0, len) is the path up to comp. */
static quant_ck_status component_failed(const ck_dir *d, int at, const char *comp, const char *rel,
                                        size_t len, quant_ck_error *err)
{
    int e = errno;
    struct stat sb;
    if (fstatat(at, comp, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode))
        return fail_at(err, QUANT_CK_ERR_ACCESS, d, rel, len, CK_LINK_REFUSED);
    return fail_at(err, QUANT_CK_ERR_IO, d, rel, len, strerror(e));
}

/* Confined: each component opened under the one before with O_NOFOLLOW, the intermediate ones
 * with O_DIRECTORY, the last with `flags`. */
static quant_ck_status walk(const ck_dir *d, const char *rel, int flags, int *fd,
                            quant_ck_error *err)
{
    if (!plain_path(rel))
        return ck_fail_in(err, QUANT_CK_ERR_ACCESS, d, rel,
                          "not a plain relative path (no '..', '.', empty components or "
                          "leading '/')");
    char *buf = strdup(rel);
    if (!buf) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    quant_ck_status st = QUANT_CK_OK;
    int at = d->fd;
    for (char *comp = buf;;) {
        char *slash = strchr(comp, '/');
        if (slash) *slash = '\0';
        size_t len = (size_t)(comp - buf) + strlen(comp);
        int next =
            openat(at, comp, (slash ? O_RDONLY | O_DIRECTORY : flags) | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0) st = component_failed(d, at, comp, rel, len, err);
        if (at != d->fd) close(at);
        at = next;
        if (next < 0 || !slash) break;
        comp = slash + 1;
    }
    free(buf);
    *fd = at;
    return st;
}

/* Following links: one openat(), `rel` as given (absolute, "..", links). */
static quant_ck_status open_plain(const ck_dir *d, const char *rel, int flags, int *fd,
                                  quant_ck_error *err)
{
    *fd = openat(d->fd, rel, flags | O_CLOEXEC);
    return *fd >= 0 ? QUANT_CK_OK : ck_fail_in(err, QUANT_CK_ERR_IO, d, rel, strerror(errno));
}

/* The opened descriptor is of `kind`; O_NONBLOCK cleared. */
static quant_ck_status check_kind(const ck_dir *d, const char *rel, int fd, ck_kind kind,
                                  struct stat *sb, quant_ck_error *err)
{
    if (fstat(fd, sb) != 0) return ck_fail_in(err, QUANT_CK_ERR_IO, d, rel, strerror(errno));
    bool ok = (S_ISREG(sb->st_mode) && (kind & CK_KIND_REG)) ||
              (S_ISDIR(sb->st_mode) && (kind & CK_KIND_DIR));
    if (!ok)
        return ck_fail_in(err, QUANT_CK_ERR_IO, d, rel,
                          kind == CK_KIND_REG   ? "not a regular file"
                          : kind == CK_KIND_DIR ? "not a directory"
                                                : "not a regular file or a directory");
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
        return ck_fail_in(err, QUANT_CK_ERR_IO, d, rel, strerror(errno));
    return QUANT_CK_OK;
}

quant_ck_status ck_open_in(const ck_dir *d, const char *rel, ck_kind kind, int *fd, struct stat *sb,
                           quant_ck_error *err)
{
    struct stat own;
    int flags = O_RDONLY | O_NONBLOCK | (kind == CK_KIND_DIR ? O_DIRECTORY : 0), got = -1;
    *fd = -1;
    quant_ck_status st =
        d->nofollow ? walk(d, rel, flags, &got, err) : open_plain(d, rel, flags, &got, err);
    if (st == QUANT_CK_OK) st = check_kind(d, rel, got, kind, sb ? sb : &own, err);
    if (st != QUANT_CK_OK && got >= 0) close(got);
    if (st == QUANT_CK_OK) *fd = got;
    return st;
}

int quant_open_beneath(int dir_fd, const char *rel, int flags, quant_ck_error *err)
{
    if (!rel) {
        quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_open_beneath: NULL path");
        return -1;
    }
    if ((flags & O_ACCMODE) != O_RDONLY || (flags & ~(O_ACCMODE | BENEATH_FLAGS)) != 0) {
        quant_ck_fail(err, QUANT_CK_ERR_ARG,
                      "quant_open_beneath: flags 0x%x: only O_RDONLY, optionally O_DIRECTORY",
                      (unsigned)flags);
        return -1;
    }
    ck_dir d = {.fd = dir_fd, .shown = NULL, .nofollow = true};
    int fd;
    ck_kind kind = (flags & O_DIRECTORY) ? CK_KIND_DIR : CK_KIND_ANY;
    return ck_open_in(&d, rel, kind, &fd, NULL, err) == QUANT_CK_OK ? fd : -1;
}
