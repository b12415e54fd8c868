/* util.c -- the small things every `quant` subcommand uses: one-line errors on stderr ("quant: "
 * first), usage errors from getopt_long, integer option values, byte and duration formatting,
 * the monotonic clock, path joining, and the notes on stale temporaries removed before a run.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("quant: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("quant: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void cli_warn_tensors(const cli_tensor_warning *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!w[i].warning) continue;
        bool first = true;
        for (size_t k = 0; first && k < i; k++) first = !(w[k].warning && w[k].rule == w[i].rule);
        if (!first) continue;
        size_t more = 0;
        for (size_t k = i + 1; k < n; k++) more += w[k].warning && w[k].rule == w[i].rule;
        char others[64] = "";
        if (more > 0)
            snprintf(others, sizeof others, " and %zu more tensor%s", more, more == 1 ? "" : "s");
        cli_warn("tensor '%s'%s of rule %ld: %s", w[i].name, others, w[i].rule, w[i].warning);
    }
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cli_error("%s: %s (see 'quant %s --help')", cmd, msg, cmd);
    return CLI_EXIT_USAGE;
}

int cli_getopt_error(const char *cmd, int c, char **argv)
{
    extern int optind, optopt;
    /* A long option is the previous word (up to any '='); a short one is optopt. */
    const char *word = optind > 0 ? argv[optind - 1] : "";
    int len = (int)strcspn(word, "=");
    char shortopt[3] = {'-', (char)optopt, '\0'};
    if (strncmp(word, "--", 2) != 0 && optopt > 0 && optopt < 128) {
        word = shortopt;
        len = 2;
    }
    if (c == ':') return cli_usage_error(cmd, "option '%.*s' needs a value", len, word);
    return cli_usage_error(cmd, "unknown option '%.*s'", len, word);
}

int cli_ck_error(const quant_ck_error *err)
{
    cli_error("%s", err->message[0] ? err->message : quant_ck_status_str(err->status));
    return CLI_EXIT_FAIL;
}

bool cli_parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) return false;
    *out = v;
    return true;
}

bool cli_parse_threads(const char *cmd, const char *s, int *out)
{
    long v;
    if (!cli_parse_long(s, 0, QUANT_MAX_THREADS, &v)) {
        cli_usage_error(cmd, "--threads must be an integer in 0..%d, not '%s'", QUANT_MAX_THREADS,
                        s);
        return false;
    }
    *out = (int)v;
    return true;
}

void cli_fmt_bytes(uint64_t n, char *buf, size_t cap)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (n < 1024) {
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
        return;
    }
    double v = (double)n / 1024.0;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", v, units[u]);
}

void cli_fmt_duration(double seconds, char *buf, size_t cap)
{
    if (!(seconds >= 0.0)) seconds = 0.0;
    if (seconds > 359999.0) seconds = 359999.0; /* 99:59:59 */
    unsigned long s = (unsigned long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, cap, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, cap, "%lu:%02lu", s / 60, s % 60);
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char *cli_dirname(const char *path)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--; /* "out/" is the directory "out" */
    while (len > 0 && path[len - 1] != '/') len--;
    while (len > 1 && path[len - 1] == '/') len--;
    if (len == 0) return strdup(".");
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, path, len);
        d[len] = '\0';
    }
    return d;
}

char *cli_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%s", dir, name);
    return s;
}

/* A quant_stale_fn: one line per temporary removed or left. */
static void stale_note(void *user, const quant_stale_temp *t)
{
    (void)user;
    const char *path = strncmp(t->path, "./", 2) == 0 ? t->path + 2 : t->path; /* as OUT was */
    if (t->removed)
        cli_error("removed stale temporary %s (left by a run that did not finish)", path);
    else
        cli_error("left temporary %s in place: %s", path, t->kept_why);
}

void cli_clean_stale(const char *path, const char *also)
{
    char *dir = cli_dirname(path), *other = also ? cli_dirname(also) : NULL;
    if (dir) quant_remove_stale_temps(dir, stale_note, NULL, NULL); /* a failure is no matter */
    if (other && (!dir || strcmp(other, dir) != 0))
        quant_remove_stale_temps(other, stale_note, NULL, NULL);
    free(dir);
    free(other);
}

int cli_put_text(char *text)
{
    if (!text) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    puts(text);
    free(text);
    return CLI_EXIT_OK;
}
