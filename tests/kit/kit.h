/* kit.h -- the test kit: helpers shared by the Check suites (tests/ckpt, tests/daemon) and the
 * benches (bench/), needing only libc so that stats-bench can link it. Owns temporary
 * directories and recursive removal, path joining, whole-file I/O, safetensors fixtures built from
 * a tensor list, the monotonic clock, and starting, waiting for and stopping the real quantd.
 * Nothing here fails a test or exits: every helper reports failure by its return value (errno
 * set), and each caller decides (Check asserts in the suites' wrappers, bench_fail in the benches).
 * Running out of memory is the one exception: the allocating helpers abort with a message.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_KIT_H
#define QUANT_KIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- files and directories ------------------------------------------------------------------ */

/* A fresh directory $TMPDIR/PREFIX-XXXXXX ($TMPDIR unset or empty: /tmp), malloc'd; NULL when
 * it cannot be made. */
char *kit_tmpdir(const char *prefix);
/* Removes path and everything under it, links not followed; 0, or -1 when something stayed. */
int kit_rmtree(const char *path);
/* "dir/name", malloc'd. */
char *kit_join(const char *dir, const char *name);
/* The whole file, malloc'd with a NUL after its last byte; *n (when not NULL) gets its size. NULL
 * when it cannot be read. */
void *kit_read_file(const char *path, size_t *n);
/* Creates (or truncates) path holding the n bytes; 0, or -1. */
int kit_write_file(const char *path, const void *data, size_t n);

/* ---- safetensors fixtures -------------------------------------------------------------------- */

/* One tensor: raw little-endian data of the safetensors dtype ("F32", "BF16", ...). data NULL
 * means nbytes of zeros (kit_st_write leaves them a hole in a sparse file). */
typedef struct kit_st_tensor {
    const char *name;
    const char *dtype;
    int rank;
    int64_t shape[8];
    const void *data;
    size_t nbytes;
} kit_st_tensor;

/* The header JSON of the n tensors, packed back to back in order, with "__metadata__" from
 * meta_json (an object's text) first when not NULL, padded with spaces to a multiple of 8;
 * malloc'd, *len gets its length. */
char *kit_st_header(const kit_st_tensor *t, size_t n, const char *meta_json, size_t *len);
/* The whole file image (8-byte length, header, data), malloc'd; *len gets its size. */
unsigned char *kit_st_build(const kit_st_tensor *t, size_t n, const char *meta_json, size_t *len);
/* Writes that file image to path without holding it in memory; 0, or -1. */
int kit_st_write(const char *path, const kit_st_tensor *t, size_t n, const char *meta_json);
/* A raw file: the 8-byte length of header, header as given, then n data bytes. No validation,
 * for malformed files too; 0, or -1. */
int kit_st_write_raw(const char *path, const char *header, const void *data, size_t n);

/* ---- time ------------------------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in seconds. */
double kit_now(void);
void kit_sleep_ms(int ms);

/* ---- quantd ---------------------------------------------------------------------------------- */

/* How to start quantd: no config file, on 127.0.0.1:0, data in data_dir, its port written to
 * port_file, at log_level, then extra (NULL-terminated, may be NULL). */
typedef struct kit_quantd_opts {
    const char *bin;
    const char *data_dir;
    const char *port_file;
    const char *log_level;
    const char *const *extra;
    const char *log_file;      /* its stderr appended here when not NULL */
    const char *quant_threads; /* QUANTD_QUANT_THREADS in its environment when not NULL */
} kit_quantd_opts;

/* Removes a stale port file and forks quantd; its pid, or -1 (errno set; E2BIG: too many extra
 * arguments). */
pid_t kit_quantd_spawn(const kit_quantd_opts *o);
/* Polls port_file until quantd writes its port (returned, > 0). 0 when timeout_s passed first;
 * -1 when it exited first, its wait status in *status. */
int kit_quantd_wait_port(pid_t pid, const char *port_file, double timeout_s, int *status);
/* Sends sig and waits up to timeout_s; the wait status, or -1 (errno set; ETIMEDOUT: still
 * running, the caller kills it). */
int kit_quantd_stop(pid_t pid, int sig, double timeout_s);
/* A wait status as an exit code: the exit status, or 128 + the signal. */
int kit_exit_code(int status);
/* Runs the program bin as `argv0 ARGS...` (args NULL-terminated, at most 30) with stdin from
 * /dev/null, stdout into out_path and stderr into err_path (either NULL: /dev/null) and waits;
 * its exit code as kit_exit_code gives it, 126 when the redirections failed, 127 when bin could
 * not be run, -1 when fork failed. */
int kit_run(const char *bin, const char *argv0, const char *const *args, const char *out_path,
            const char *err_path);

#endif /* QUANT_KIT_H */
