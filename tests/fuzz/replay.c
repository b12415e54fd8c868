/* replay.c -- runs a libFuzzer harness without libFuzzer: calls LLVMFuzzerTestOneInput on the
 * empty input, then on every regular file of the directories (and files) named on the command
 * line, in name order, so `make check` (and `make check-asan`, with sanitizers) replays each
 * committed corpus as a regression test. A crash or sanitizer report stops it like any test;
 * it prints the file it is on first, so the input at fault is named. Deterministic: no
 * mutation, no time limit.
 * Usage: replay-TARGET DIR_OR_FILE...
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700 /* scandir, alphasort */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"

/* Optional, as in libFuzzer. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
/* Present when AddressSanitizer or UBSan is linked (make check-asan). */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static const char *current = "(the empty input)"; /* the input being run */

static void say_current(void)
{
    static const char what[] = "replay: the input at fault: ";
    ssize_t w = write(2, what, sizeof what - 1);
    w += write(2, current, strlen(current));
    w += write(2, "\n", 1);
    (void)w;
}

static void on_signal(int sig)
{
    say_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_crashes(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(sigs[i], &sa, NULL);
    }
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(say_current);
}

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *bigger = realloc(buf, cap * 2);
        if (!bigger) free(buf);
        buf = bigger;
        cap *= 2;
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        fprintf(stderr, "replay: %s: cannot read\n", path);
        free(buf);
        return -1;
    }
    /* a copy of exactly n bytes, so AddressSanitizer sees a read one byte too far */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    current = path;
    LLVMFuzzerTestOneInput(exact, n);
    current = "(between inputs)";
    free(exact);
    return 0;
}

/* Every regular file of dir (not recursing), in name order; the count, or -1. */
static long replay_dir(const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    long count = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (count >= 0 && replay_file(path) == 0)
                count++;
            else
                count = -1;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv)
{
    catch_crashes();
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
    long total = 1;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        long k = stat(argv[i], &st) == 0 && !S_ISDIR(st.st_mode) ? (replay_file(argv[i]) ? -1 : 1)
                                                                 : replay_dir(argv[i]);
        if (k < 0) return 1;
        total += k;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    const char *name = strrchr(argv[0], '/');
    printf("%-24s %5ld inputs  %6.3f s\n", name ? name + 1 : argv[0], total, s);
    return 0;
}
