/* fsutil.h -- file-system helpers the daemon needs: recursive removal, directory creation, a
 * file's SHA-256 (nettle), fsync of a file and its directory, and the check that a path lies
 * inside one of the configured roots.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_FSUTIL_H
#define QD_FSUTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"

/* Removes path and everything under it (symlinks are removed, not followed); a missing path is
 * fine. */
qd_status qd_rmtree(const char *path, qd_err *err);
/* mkdir with mode, an existing directory being fine. */
qd_status qd_mkdir(const char *path, unsigned mode, qd_err *err);
/* SHA-256 of the file as 64 lowercase hex digits (hex has 65 bytes) and its size. */
qd_status qd_sha256_file(const char *path, char hex[65], int64_t *size, qd_err *err);
/* Removes an upload (DATA/uploads/ID/model.safetensors) and its directory; best effort. */
void qd_remove_upload(const char *path);
/* fsyncs the file, renames it to `to`, fsyncs to's directory. */
qd_status qd_publish_file(int fd, const char *from, const char *to, qd_err *err);
/* The canonical (realpath) form of path if it lies inside one of roots (given canonical), else
 * NULL with err saying why. malloc'd. */
char *qd_path_in_roots(const char *path, char *const *roots, int n_roots, qd_err *err);

/* msg with every server path of `paths` (n of them) taken out, into out (len bytes): "P/" is
 * dropped (what follows names the file relative to P), a bare "P" becomes "(server)"; the
 * longest path that matches at a position wins. For errors that clients read. */
void qd_scrub_paths(const char *msg, const char *const *paths, size_t n, char *out, size_t len);

#endif /* QD_FSUTIL_H */
