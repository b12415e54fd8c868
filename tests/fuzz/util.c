/* util.c -- the helpers of fuzz.h every harness links: a private temporary directory removed at
 * exit by the test kit's kit_rmtree ($TMPDIR, else /dev/shm when writable, else /tmp), the
 * environment without QUANTD_* variables, and the input as a C string.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "kit.h"

static char tmpdir[4096];

static void remove_tmpdir(void)
{
    if (tmpdir[0]) kit_rmtree(tmpdir);
}

const char *fuzz_tmpdir(void)
{
    if (tmpdir[0]) return tmpdir;
    /* memory rather than disk when there is a choice: fuzz_config rewrites a file per input */
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/quant-fuzz.XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror(tmpdir);
        tmpdir[0] = '\0';
        return NULL;
    }
    atexit(remove_tmpdir);
    return tmpdir;
}

extern char **environ;

void fuzz_clear_quantd_env(void)
{
    for (size_t i = 0; environ[i];) {
        if (strncmp(environ[i], "QUANTD_", 7) != 0) {
            i++;
            continue;
        }
        char name[256];
        size_t n = strcspn(environ[i], "=");
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1),
                 environ[i]);
        FUZZ_CHECK(unsetenv(name) == 0); /* environ shifts down: i stays */
    }
}

char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) return NULL;
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}
