/* benchutil.h -- what the benches share (pipeline-bench, daemon-bench, stats-bench): the message
 * prefix and failing loudly, monotonic time, running a program, the temporary directory removed
 * on every exit, the quantd they start (ephemeral port, port file, VmHWM, SIGTERM and exit 0),
 * and the generated bf16 weights. Built on the test kit (tests/kit/kit.h); links no library of the
 * project (stats-bench links none).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef BENCHUTIL_H
#define BENCHUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* Names the bench in every message ("NAME: ..."); call first. */
void bench_init(const char *name);

/* Prints "NAME: message" to stderr, cleans up (bench_cleanup) and exits 1. Thread-safe: the
 * first caller cleans up, later ones wait for its exit. */
__attribute__((format(printf, 1, 2))) _Noreturn void bench_fail(const char *fmt, ...);

/* bench_fail("what: strerror(errno)"). */
_Noreturn void bench_die(const char *what);

/* Kills a running quantd and removes the temporary directory; safe to call more than once. */
void bench_cleanup(void);

/* CLOCK_MONOTONIC in seconds. */
double bench_now(void);
/* The 1-minute load average as /proc/loadavg gives it ("?" when unreadable); a static buffer. */
const char *bench_load_avg(void);

void bench_sleep_ns(long ns);

/* Runs argv (PATH searched) and returns its wait status, -1 (errno set) when it could not be
 * started or waited for; its resource usage into ru when not NULL. */
int bench_spawn_wait(char *const argv[], struct rusage *ru);

/* Creates $TMPDIR/NAME-XXXXXX (TMPDIR defaults to /tmp), removed by bench_cleanup; returns it. */
const char *bench_make_root(void);

/* The temporary directory ("" before bench_make_root). */
const char *bench_root(void);

/* Starts quantd with no config file on 127.0.0.1:0, data in ROOT/var, its port written to
 * ROOT/port, log level warn, plus extra (NULL-terminated, may be NULL); with quant_threads,
 * QUANTD_QUANT_THREADS=quant_threads in its environment. Returns the port once written. */
int bench_quantd_start(const char *quantd, const char *const extra[], const char *quant_threads);

/* Fails, saying when, if quantd has exited. */
void bench_quantd_alive(const char *when);

pid_t bench_quantd_pid(void);
/* `quantd token create --role ROLE --name NAME` on the bench's data directory (quantd may be
 * running); the token, in a static buffer. */
const char *bench_quantd_token(const char *quantd, const char *role, const char *name);

/* quantd's peak resident set (VmHWM) in KiB. */
long bench_quantd_hwm_kib(void);

/* SIGTERM, then waits up to 60 s; returns the wait status (-1 on timeout, killed by cleanup). */
int bench_quantd_stop(void);

/* Cleans up; returns the exit code, 1 after saying so when quantd_status (from
 * bench_quantd_stop) is not a clean exit 0. */
int bench_finish(int quantd_status);

/* Fills x with n roughly normal weights (sd ~0.02) from seed, each converted by to_bf16 (the
 * caller passes libquant's quant_f32_to_bf16, which this file does not link). */
void bench_fill_bf16(uint16_t *x, size_t n, uint64_t seed, uint16_t (*to_bf16)(float));

#endif
