/* fsutil.c -- recursive removal (nftw), directories, SHA-256 of files (nettle), publishing a
 * file by fsync + rename, where a server-side source path lies under the source roots (checked
 * on the text, component by component, before the file system is touched), and server paths
 * taken out of client messages.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 || errno == ENOENT ? 0 : -1;
}

qd_status qd_rmtree(const char *path, qd_err *err)
{
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT) return QD_OK;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return qd_fail(err, QD_IO, "%s: cannot remove: %s", path, strerror(errno));
    return QD_OK;
}

qd_status qd_mkdir(const char *path, unsigned mode, qd_err *err)
{
    if (mkdir(path, (mode_t)mode) == 0 || errno == EEXIST) return QD_OK;
    return qd_fail(err, QD_IO, "%s: cannot create directory: %s", path, strerror(errno));
}

qd_status qd_sha256_file(const char *path, char hex[65], int64_t *size, qd_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qd_fail(err, QD_IO, "%s: %s", path, strerror(errno));
    enum { BUF = 1 << 20 };
    uint8_t *buf = malloc(BUF);
    if (!buf) {
        close(fd);
        return qd_fail(err, QD_NOMEM, "out of memory");
    }
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    int64_t total = 0;
    ssize_t n;
    while ((n = read(fd, buf, BUF)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0) {
            sha256_update(&ctx, (size_t)n, buf);
            total += n;
        }
    int saved = errno;
    free(buf);
    close(fd);
    if (n < 0) return qd_fail(err, QD_IO, "%s: read failed: %s", path, strerror(saved));
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_digest(&ctx, sizeof digest, digest);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    if (size) *size = total;
    return QD_OK;
}

void qd_remove_upload(const char *path)
{
    struct stat sb;
    qd_err err;
    if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) /* a checkpoint job's inputs */
        qd_rmtree(path, &err);
    else
        unlink(path);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        snprintf(slash + 1, sizeof dir - (size_t)(slash + 1 - dir), "%s", QD_RECEIVING_MARK);
        unlink(dir); /* a receiving job's mark (receiving.c) */
        *slash = '\0';
        rmdir(dir);
    }
}

/* path without its trailing slashes, checked to be absolute plain components; malloc'd. */
static char *plain_absolute(const char *path, qd_err *err)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    if (path[0] != '/') {
        qd_fail(err, QD_INVALID, "source.path must be an absolute path");
        return NULL;
    }
    for (const char *c = path + 1; c < path + n;) {
        size_t k = strcspn(c, "/");
        if (c + k > path + n) k = (size_t)(path + n - c);
        if (k == 0 || (k == 1 && c[0] == '.') || (k == 2 && c[0] == '.' && c[1] == '.')) {
            qd_fail(err, QD_INVALID,
                    "source.path must be made of plain components (no '.', '..' or '//')");
            return NULL;
        }
        c += k + 1;
    }
    char *p = strndup(path, n);
    if (!p) qd_fail(err, QD_NOMEM, "out of memory");
    return p;
}

/* The root path lies under (or is): the part of path after root, "" when equal; NULL when not
 * under it. */
static const char *under_root(const char *path, const char *root)
{
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/') return path + 1;
    if (strncmp(path, root, n) != 0 || (path[n] != '/' && path[n] != '\0')) return NULL;
    return path[n] == '/' ? path + n + 1 : path + n;
}

qd_status qd_source_locate(const char *path, char *const *roots, int n_roots, int *dir_fd,
                           char **rel, char **norm, qd_err *err)
{
    *dir_fd = -1;
    *rel = NULL;
    if (norm) *norm = NULL;
    if (n_roots == 0)
        return qd_fail(err, QD_INVALID,
                       "this server reads no checkpoints from its disk (no "
                       "source roots are configured)");
    qd_err why;
    char *p = plain_absolute(path, &why);
    if (!p) {
        if (err) *err = why;
        return strstr(why.message, "memory") ? QD_NOMEM : QD_INVALID;
    }
    const char *root = NULL, *below = NULL;
    for (int i = 0; i < n_roots && !root; i++)
        if ((below = under_root(p, roots[i]))) root = roots[i];
    if (!root) {
        free(p);
        return qd_fail(err, QD_INVALID, "source.path is not under a source root of this server");
    }
    bool slash_root = strcmp(root, "/") == 0;
    const char *base = strrchr(root, '/') + 1; /* the root's own name */
    size_t parent_len = slash_root || base == root + 1 ? 1 : (size_t)(base - 1 - root);
    char *parent = strndup(root, parent_len);
    size_t len = strlen(base) + strlen(below) + 2;
    *rel = malloc(len);
    if (!parent || !*rel) {
        free(parent);
        free(*rel);
        *rel = NULL;
        free(p);
        return qd_fail(err, QD_NOMEM, "out of memory");
    }
    snprintf(*rel, len, "%s%s%s", slash_root ? "" : base, slash_root || !*below ? "" : "/", below);
    *dir_fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(parent);
    if (*dir_fd < 0 || !**rel) {
        qd_status st = qd_fail(err, QD_INVALID,
                               *dir_fd < 0 ? "the source root cannot be opened: %s"
                                           : "source.path names the root directory itself%s",
                               *dir_fd < 0 ? strerror(errno) : "");
        if (*dir_fd >= 0) close(*dir_fd);
        *dir_fd = -1;
        free(*rel);
        *rel = NULL;
        free(p);
        return st;
    }
    if (norm)
        *norm = p;
    else
        free(p);
    return QD_OK;
}

static bool path_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

/* The longest of paths that starts msg and ends there (at a '/' or a character that is not part
 * of a file name: "/srv/var" is not in "/srv/variant"), or 0. */
static size_t match_path(const char *msg, const char *const *paths, size_t n, bool *slash)
{
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = paths[i] ? strlen(paths[i]) : 0;
        while (k > 1 && paths[i][k - 1] == '/') k--;
        if (k == 0 || k <= best || strncmp(msg, paths[i], k) != 0 || path_char(msg[k])) continue;
        best = k;
        *slash = msg[k] == '/';
    }
    return best;
}

void qd_scrub_paths(const char *msg, const char *const *paths, size_t n, char *out, size_t len)
{
    size_t at = 0;
    for (const char *p = msg; *p && at + 1 < len;) {
        bool slash = false;
        size_t k = match_path(p, paths, n, &slash);
        if (k == 0) {
            out[at++] = *p++;
            continue;
        }
        p += k + slash;
        if (!slash) at += (size_t)snprintf(out + at, len - at, "(server)");
        if (at >= len) at = len - 1;
    }
    out[at] = '\0';
}
