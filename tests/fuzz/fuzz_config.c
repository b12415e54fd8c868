/* fuzz_config.c -- libFuzzer harness of quantd's settings: the input up to its first NUL byte is
 * an INI file, written to a temporary file and read by qd_config_load(--config FILE) after the
 * embedded defaults; the NUL-separated strings after it (at most 8) are more command-line
 * arguments (any "--config" among them is dropped: the harness chooses the one file read). A
 * configuration that loads is printed (qd_config_print, as check-config does); when it came
 * from the file alone, its printout must load again and print the same settings. The QUANTD_*
 * variables are cleared once, so the environment plays no part. No network, no other file is
 * written.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700 /* open_memstream, unsetenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz.h"

#define MAX_ARGS     8
#define INI_LINE_MAX 199

static char conf_path[4200], again_path[4200];
static FILE *devnull;

static void init(void)
{
    if (devnull) return;
    const char *dir = fuzz_tmpdir();
    FUZZ_CHECK(dir);
    snprintf(conf_path, sizeof conf_path, "%s/fuzz.conf", dir);
    snprintf(again_path, sizeof again_path, "%s/again.conf", dir);
    devnull = fopen("/dev/null", "w");
    FUZZ_CHECK(devnull);
    fuzz_clear_quantd_env(); /* no QUANTD_* variable may change what a file means */
}

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f);
    FUZZ_CHECK(fwrite(data, 1, size, f) == size);
    FUZZ_CHECK(fclose(f) == 0);
}

/* The printout without its first line (which names the file read). */
static char *print(const qd_config *cfg, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    FUZZ_CHECK(f);
    qd_config_print(cfg, f);
    FUZZ_CHECK(fclose(f) == 0);
    return text;
}

static const char *settings(const char *printout)
{
    const char *nl = strchr(printout, '\n');
    FUZZ_CHECK(nl);
    return nl + 1;
}

/* Whether a line of text is longer than a config file's lines may be (quantd.conf: "Lines hold
 * at most 199 characters"). */
static bool overlong_line(const char *text)
{
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        if (n > INI_LINE_MAX) return true;
        p += n + (p[n] == '\n');
    }
    return false;
}

/* The printout of a configuration loaded from one file must load and print the same (unless a
 * line is too long for a file: a data_dir of 190 characters gives a longer db line; known). */
static void round_trip(const qd_config *cfg)
{
    size_t len;
    char *first = print(cfg, &len);
    if (overlong_line(first)) {
        free(first);
        return;
    }
    write_file(again_path, first, len);
    char *argv[] = {"quantd", "--config", again_path, NULL};
    qd_config again;
    qd_command cmd;
    bool exit_now;
    char msg[1024];
    bool ok = qd_config_load(&again, 3, argv, &cmd, &exit_now, devnull, msg, sizeof msg);
    if (!ok) fprintf(stderr, "the printout does not load again: %s\n%s", msg, first);
    FUZZ_CHECK(ok);
    char *second = print(&again, &len);
    if (strcmp(settings(first), settings(second)) != 0)
        fprintf(stderr, "printouts differ:\n%s\n%s", first, second);
    FUZZ_CHECK(strcmp(settings(first), settings(second)) == 0);
    free(first);
    free(second);
    qd_config_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init();
    char *text = fuzz_strndup(data, size);
    FUZZ_CHECK(text);
    size_t ini_len = strlen(text);
    write_file(conf_path, text, ini_len);

    char *argv[3 + MAX_ARGS + 1] = {"quantd", "--config", conf_path};
    int argc = 3, extra = 0;
    for (size_t at = ini_len + 1; at < size && extra < MAX_ARGS; at += strlen(text + at) + 1) {
        if (strncmp(text + at, "--config", 8) == 0) continue;
        argv[argc++] = text + at;
        extra++;
    }
    argv[argc] = NULL;

    qd_config cfg;
    qd_command cmd;
    bool exit_now;
    char msg[1024];
    memset(msg, 'x', sizeof msg);
    bool ok = qd_config_load(&cfg, argc, argv, &cmd, &exit_now, devnull, msg, sizeof msg);
    FUZZ_CHECK(memchr(msg, '\0', sizeof msg));
    if (!ok) {
        FUZZ_CHECK(msg[0] != '\0');
    } else if (!exit_now) {
        FUZZ_CHECK(cfg.listen_host && cfg.data_dir && cfg.db_path && cfg.tls_priorities);
        FUZZ_CHECK(cfg.n_source_roots >= 0 && cfg.n_source_roots <= QD_MAX_SOURCE_ROOTS);
        qd_config_print(&cfg, devnull);
        if (extra == 0) round_trip(&cfg);
    }
    qd_config_free(&cfg);
    free(text);
    return 0;
}
