/* tarstream.h -- a list of files as one POSIX tar (pax interchange format, written by libarchive)
 * streamed as a libmicrohttpd callback response in bounded memory, with its exact size known
 * before the first byte is sent.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_TARSTREAM_H
#define QD_TARSTREAM_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One member: its name in the archive, the file it is read from, the bytes it must have. */
typedef struct qd_tar_file {
    const char *name;
    const char *path;
    uint64_t bytes;
} qd_tar_file;

/* The exact byte size of the tar of `files` (n of them, in that order, modified at `mtime`);
 * false (with `why`) when libarchive refuses a member (a name it cannot encode, say). */
bool qd_tar_size(const qd_tar_file *files, size_t n, int64_t mtime, uint64_t *size, char *why,
                 size_t len);

/* The response streaming that tar: members in the given order, each a regular file of mode
 * 0644, uid and gid 0, no user or group name, modified at `mtime` (seconds), so the same files
 * always give the same bytes. `size` is qd_tar_size()'s. Each file is opened when its turn
 * comes and must still have its `bytes` (checked when opened and when read to its end): a file
 * missing or changed cuts the stream (the client sees a short body) and logs a warning naming
 * `label` and the member. Strings are copied. NULL when out of memory. */
struct MHD_Response *qd_tar_response(const qd_tar_file *files, size_t n, int64_t mtime,
                                     uint64_t size, const char *label);

#endif /* QD_TARSTREAM_H */
