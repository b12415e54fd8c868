/* kit.c -- the test kit shared by the suites and the benches (see kit.h). libc only.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp, setenv */
#include "kit.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define QUANTD_ARGV 48 /* quantd argv entries at most, NULL included */
#define POLL_MS     10 /* port-file and exit polls */

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "kit: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

/* ---- files and directories ------------------------------------------------------------------ */

char *kit_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = xrealloc(NULL, n);
    snprintf(s, n, "%s/%s", dir, name);
    return s;
}

char *kit_tmpdir(const char *prefix)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    size_t n = strlen(base) + strlen(prefix) + 9;
    char *path = xrealloc(NULL, n);
    snprintf(path, n, "%s/%s-XXXXXX", base, prefix);
    if (mkdtemp(path)) return path;
    free(path);
    return NULL;
}

static int rm_failed; /* nftw has no user pointer; kit_rmtree is not called concurrently */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    if (remove(path) != 0) rm_failed = 1;
    return 0;
}

int kit_rmtree(const char *path)
{
    if (!path) return 0;
    rm_failed = 0;
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) return -1;
    return rm_failed ? -1 : 0;
}

void *kit_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0, got;
    char *buf = xrealloc(NULL, cap + 1);
    while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) buf = xrealloc(buf, (cap *= 2) + 1);
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    if (n) *n = len;
    return buf;
}

int kit_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* ---- safetensors fixtures -------------------------------------------------------------------- */

/* Appends printf output to a growing string. */
__attribute__((format(printf, 3, 4))) static void appendf(char **s, size_t *len, const char *fmt,
                                                          ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) abort();
    *s = xrealloc(*s, *len + (size_t)k + 1);
    va_start(ap, fmt);
    vsnprintf(*s + *len, (size_t)k + 1, fmt, ap);
    va_end(ap);
    *len += (size_t)k;
}

char *kit_st_header(const kit_st_tensor *t, size_t n, const char *meta_json, size_t *len)
{
    char *h = NULL;
    size_t hl = 0, off = 0;
    appendf(&h, &hl, "{");
    if (meta_json) appendf(&h, &hl, "\"__metadata__\":%s%s", meta_json, n ? "," : "");
    for (size_t i = 0; i < n; i++) {
        appendf(&h, &hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", t[i].name,
                t[i].dtype);
        for (int d = 0; d < t[i].rank; d++)
            appendf(&h, &hl, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
        appendf(&h, &hl, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].nbytes);
        off += t[i].nbytes;
    }
    appendf(&h, &hl, "}");
    while (hl % 8) appendf(&h, &hl, " ");
    *len = hl;
    return h;
}

static void put_len(unsigned char out[8], size_t hl)
{
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)hl >> (8 * i));
}

unsigned char *kit_st_build(const kit_st_tensor *t, size_t n, const char *meta_json, size_t *len)
{
    size_t hl, data = 0;
    char *h = kit_st_header(t, n, meta_json, &hl);
    for (size_t i = 0; i < n; i++) data += t[i].nbytes;
    *len = 8 + hl + data;
    unsigned char *out = xrealloc(NULL, *len);
    put_len(out, hl);
    memcpy(out + 8, h, hl);
    size_t at = 8 + hl;
    for (size_t i = 0; i < n; i++) {
        if (t[i].data && t[i].nbytes)
            memcpy(out + at, t[i].data, t[i].nbytes);
        else if (t[i].nbytes)
            memset(out + at, 0, t[i].nbytes);
        at += t[i].nbytes;
    }
    free(h);
    return out;
}

int kit_st_write(const char *path, const kit_st_tensor *t, size_t n, const char *meta_json)
{
    size_t hl;
    char *h = kit_st_header(t, n, meta_json, &hl);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h);
        return -1;
    }
    unsigned char len[8];
    put_len(len, hl);
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(h, 1, hl, f) == hl;
    off_t end = (off_t)(8 + hl);
    for (size_t i = 0; ok && i < n; end += (off_t)t[i].nbytes, i++) {
        if (t[i].data)
            ok = fseeko(f, end, SEEK_SET) == 0 &&
                 fwrite(t[i].data, 1, t[i].nbytes, f) == t[i].nbytes;
    }
    /* trailing zero tensors: a hole up to the end */
    ok = ok && fflush(f) == 0 && ftruncate(fileno(f), end) == 0;
    free(h);
    return fclose(f) == 0 && ok ? 0 : -1;
}

int kit_st_write_raw(const char *path, const char *header, const void *data, size_t n)
{
    size_t hl = strlen(header);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned char len[8];
    put_len(len, hl);
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(header, 1, hl, f) == hl &&
             (n == 0 || fwrite(data, 1, n, f) == n);
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* ---- time ------------------------------------------------------------------------------------ */

double kit_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void kit_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- quantd ---------------------------------------------------------------------------------- */

pid_t kit_quantd_spawn(const kit_quantd_opts *o)
{
    const char *argv[QUANTD_ARGV] = {o->bin,        "--config",    "/dev/null", "--listen",
                                     "127.0.0.1:0", "--data-dir",  o->data_dir, "--port-file",
                                     o->port_file,  "--log-level", o->log_level};
    int n = 11;
    for (int i = 0; o->extra && o->extra[i]; i++) {
        if (n + 1 >= QUANTD_ARGV) {
            errno = E2BIG;
            return -1;
        }
        argv[n++] = o->extra[i];
    }
    argv[n] = NULL;
    unlink(o->port_file);
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (o->log_file && !freopen(o->log_file, "a", stderr)) _exit(126);
    if (o->quant_threads) setenv("QUANTD_QUANT_THREADS", o->quant_threads, 1);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
}

int kit_quantd_wait_port(pid_t pid, const char *port_file, double timeout_s, int *status)
{
    double t0 = kit_now();
    for (;;) {
        FILE *f = fopen(port_file, "r");
        int port = 0;
        if (f) {
            if (fscanf(f, "%d", &port) != 1) port = 0;
            fclose(f);
        }
        if (port > 0) return port;
        if (waitpid(pid, status, WNOHANG) == pid) return -1;
        if (kit_now() - t0 >= timeout_s) return 0;
        kit_sleep_ms(POLL_MS);
    }
}

int kit_quantd_stop(pid_t pid, int sig, double timeout_s)
{
    if (kill(pid, sig) != 0) return -1;
    double t0 = kit_now();
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (r < 0) return -1;
        if (kit_now() - t0 >= timeout_s) {
            errno = ETIMEDOUT;
            return -1;
        }
        kit_sleep_ms(POLL_MS);
    }
}

int kit_exit_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int kit_run(const char *bin, const char *argv0, const char *const *args, const char *out_path,
            const char *err_path)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)argv0;
    while (args[n - 1] && n < 31) {
        argv[n] = (char *)args[n - 1];
        n++;
    }
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        int o = out_path ? open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600) : null;
        int e = err_path ? open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600) : null;
        if (null < 0 || o < 0 || e < 0 || dup2(null, STDIN_FILENO) < 0 ||
            dup2(o, STDOUT_FILENO) < 0 || dup2(e, STDERR_FILENO) < 0)
            _exit(126);
        execv(bin, argv);
        _exit(127);
    }
    int ws;
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR) return -1;
    return kit_exit_code(ws);
}
