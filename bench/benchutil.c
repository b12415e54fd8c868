/* benchutil.c -- owns what the benches share: the message prefix and failing loudly, time, running
 * a program, the temporary directory and the quantd a bench starts (both torn down on every exit),
 * and the generated bf16 weights. Temporary directories, the clock and starting and stopping quantd
 * come from the test kit (tests/kit/kit.c); both need only libc: stats-bench links nothing else.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _DEFAULT_SOURCE
#include "benchutil.h"

#include "kit.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_TIMEOUT 30.0 /* seconds for the port file to appear */
#define STOP_TIMEOUT  60.0 /* seconds for quantd to exit after SIGTERM */

static struct {
    const char *name;    /* the message prefix */
    char *root;          /* the temporary directory (malloc'd), removed on every exit */
    pid_t daemon;        /* running quantd, killed on failure */
    atomic_flag failing; /* the first failure cleans up; others wait for its exit */
} g = {.name = "bench", .daemon = -1, .failing = ATOMIC_FLAG_INIT};

void bench_init(const char *name)
{
    g.name = name;
}

void bench_cleanup(void)
{
    if (g.daemon > 0) {
        kill(g.daemon, SIGKILL);
        waitpid(g.daemon, NULL, 0);
        g.daemon = -1;
    }
    if (g.root) {
        kit_rmtree(g.root);
        free(g.root);
        g.root = NULL;
    }
}

_Noreturn void bench_fail(const char *fmt, ...)
{
    if (atomic_flag_test_and_set(&g.failing))
        for (;;) pause(); /* another thread is failing; its exit ends this one */
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g.name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    bench_cleanup();
    exit(1);
}

_Noreturn void bench_die(const char *what)
{
    bench_fail("%s: %s", what, strerror(errno));
}

double bench_now(void)
{
    return kit_now();
}

const char *bench_load_avg(void)
{
    static char buf[32];
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f || fscanf(f, "%31s", buf) != 1) snprintf(buf, sizeof buf, "?");
    if (f) fclose(f);
    return buf;
}

void bench_sleep_ns(long ns)
{
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
}

int bench_spawn_wait(char *const argv[], struct rusage *ru)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    struct rusage dummy;
    if (wait4(pid, &status, 0, ru ? ru : &dummy) < 0) return -1;
    return status;
}

const char *bench_make_root(void)
{
    g.root = kit_tmpdir(g.name);
    if (!g.root) bench_die("mkdtemp");
    return g.root;
}

const char *bench_root(void)
{
    return g.root ? g.root : "";
}

/* ---- quantd ---------------------------------------------------------------------------------- */

void bench_quantd_alive(const char *when)
{
    int status;
    pid_t r = waitpid(g.daemon, &status, WNOHANG);
    if (r == 0) return;
    if (r < 0) bench_die("waitpid");
    g.daemon = -1;
    bench_fail("quantd exited %s (wait status %d)", when, status);
}

int bench_quantd_start(const char *quantd, const char *const extra[], const char *quant_threads)
{
    if (!g.root) bench_fail("bench_quantd_start before bench_make_root");
    char data_dir[2200], port_file[2200];
    snprintf(data_dir, sizeof data_dir, "%s/var", g.root);
    snprintf(port_file, sizeof port_file, "%s/port", g.root);
    kit_quantd_opts o = {.bin = quantd,
                         .data_dir = data_dir,
                         .port_file = port_file,
                         .log_level = "warn",
                         .extra = extra,
                         .quant_threads = quant_threads};
    g.daemon = kit_quantd_spawn(&o);
    if (g.daemon < 0) bench_die("starting quantd");
    int status;
    int port = kit_quantd_wait_port(g.daemon, port_file, START_TIMEOUT, &status);
    if (port < 0) {
        g.daemon = -1;
        bench_fail("quantd exited during start-up (wait status %d)", status);
    }
    if (port == 0) bench_fail("quantd wrote no port file within %.0f s", START_TIMEOUT);
    return port;
}

const char *bench_quantd_token(const char *quantd, const char *role, const char *name)
{
    static char token[128];
    char cmd[4800];
    snprintf(
        cmd, sizeof cmd,
        "'%s' token create --role %s --name %s --config /dev/null --data-dir '%s/var' 2>/dev/null",
        quantd, role, name, g.root);
    /* its stderr ("created ...") is not the bench's output: a failure is reported below */
    FILE *p = popen(cmd, "r");
    if (!p) bench_die("popen");
    int got = fgets(token, sizeof token, p) != NULL;
    if (pclose(p) != 0 || !got) bench_fail("%s: failed", cmd);
    token[strcspn(token, "\n")] = '\0';
    return token;
}

pid_t bench_quantd_pid(void)
{
    return g.daemon;
}

long bench_quantd_hwm_kib(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)g.daemon);
    FILE *f = fopen(path, "r");
    if (!f) bench_die(path);
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    fclose(f);
    if (kib < 0) bench_fail("no VmHWM in %s", path);
    return kib;
}

int bench_quantd_stop(void)
{
    int status = kit_quantd_stop(g.daemon, SIGTERM, STOP_TIMEOUT);
    if (status >= 0)
        g.daemon = -1;
    else if (errno != ETIMEDOUT)
        bench_die("stopping quantd");
    return status; /* -1 on timeout: bench_cleanup() kills it */
}

int bench_finish(int quantd_status)
{
    bench_cleanup();
    if (quantd_status == 0) return 0;
    fprintf(stderr, "%s: quantd did not exit 0 after SIGTERM (wait status %d%s)\n", g.name,
            quantd_status, quantd_status < 0 ? ", timed out and killed" : "");
    return 1;
}

/* ---- generated weights ----------------------------------------------------------------------- */

void bench_fill_bf16(uint16_t *x, size_t n, uint64_t seed, uint16_t (*to_bf16)(float))
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        float v = ((float)(s & 0xffff) + (float)((s >> 16) & 0xffff) + (float)((s >> 32) & 0xffff) -
                   98302.5f) /
                  65536.0f;
        x[i] = to_bf16(v * 0.02f);
    }
}
