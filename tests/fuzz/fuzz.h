/* fuzz.h -- what the libFuzzer harnesses of tests/fuzz/ share: the entry point's prototype (the
 * replay driver calls it too), an invariant check that crashes loudly, and a private temporary
 * directory for harnesses that need files, made once per process and removed at exit.
 * SPDX-License-Identifier: Apache-2.0
 *
 * A harness must be deterministic (no time, no randomness: the same input always takes the same
 * path) and leak-free under AddressSanitizer; a failed FUZZ_CHECK is a bug the fuzzer reports
 * like a crash.
 */
#ifndef QUANT_FUZZ_H
#define QUANT_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Called by libFuzzer (or tests/fuzz/replay.c) once per input; always returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant the code under test promises: abort (a crash the fuzzer keeps) when it fails. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed\n", __FILE__, __LINE__, #cond);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A directory of this process's own under $TMPDIR (else /dev/shm or /tmp), made on the first call
 * and removed with everything in it at exit; NULL (with a message) if it cannot be made. */
const char *fuzz_tmpdir(void);

/* Unsets every QUANTD_* environment variable (the harnesses that load quantd's settings: none
 * may change what they mean). */
void fuzz_clear_quantd_env(void);

/* data[0..size) as a NUL-terminated string (malloc'd; embedded NULs stay and end it early);
 * NULL only when out of memory. */
char *fuzz_strndup(const uint8_t *data, size_t size);

#endif /* QUANT_FUZZ_H */
