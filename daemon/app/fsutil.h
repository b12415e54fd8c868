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
/* Removes an upload (DATA/uploads/ID/model.safetensors, or a checkpoint job's
 * DATA/uploads/ID/inputs directory with everything in it) and its directory ID; best effort. */
void qd_remove_upload(const char *path);
/* The file beside a job's upload (DATA/uploads/HEX/receiving) while its inputs are still
 * arriving: at a start after a crash, a job that has it cannot run (receiving.c). */
#define QD_RECEIVING_MARK "receiving"
/* Where a server-side checkpoint path is, without touching the file system: `path` must be
 * absolute and made of plain components (no "", ".", ".." components; a trailing '/' is
 * dropped) and lie, component for component, under one of roots (canonical, as the settings
 * hold them). On success *dir_fd is an open descriptor of that root's parent directory (of "/"
 * for the root "/") and *rel (malloc'd) the path below it, starting with the root's own name:
 * what quant_open_beneath() and the pipeline's input_dir_fd take, so that nothing on the way is
 * a symbolic link. *norm (malloc'd, may be NULL) gets the normalized absolute path. A path
 * outside every root is QD_INVALID with the same message whether it exists or not. */
qd_status qd_source_locate(const char *path, char *const *roots, int n_roots, int *dir_fd,
                           char **rel, char **norm, qd_err *err);

/* msg with every server path of `paths` (n of them) taken out, into out (len bytes): "P/" is
 * dropped (what follows names the file relative to P), a bare "P" becomes "(server)"; the
 * longest path that matches at a position wins. For errors that clients read. */
void qd_scrub_paths(const char *msg, const char *const *paths, size_t n, char *out, size_t len);

#endif /* QD_FSUTIL_H */
