/* qdtest.h -- what the daemon test suites share: the suites, and small helpers for temporary
 * directories (the integration helpers that start quantd live in qdproc.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QDTEST_H
#define QDTEST_H

#include <check.h>

Suite *suite_store(void);
Suite *suite_config(void);
Suite *suite_log(void);
Suite *suite_api(void);
Suite *suite_stats_store(void);
Suite *suite_stats_api(void);
Suite *suite_srq(void);
Suite *suite_openapi(void);
Suite *suite_auth(void);
Suite *suite_fsutil(void);
Suite *suite_limits(void);
Suite *suite_sources(void);
Suite *suite_tls(void);
Suite *suite_range(void);
Suite *suite_http(void);
Suite *suite_faults(void);
Suite *suite_plans(void);
Suite *suite_outputs(void);
Suite *suite_examples(void);

/* A fresh directory under $TMPDIR (caller frees the path; qdt_rmtree removes it). */
char *qdt_tmpdir(void);
void qdt_rmtree(const char *path);
/* dir + "/" + name, malloc'd. */
char *qdt_join(const char *dir, const char *name);
/* A safetensors file of n F32 tensors [rows, 4096] named layers.I.proj.weight, zeros, written
 * sparse (instant): a job on it runs for a while (8 x 8192 rows: 1 GiB). */
void qdt_make_big(const char *path, int n, long rows);
/* Sleeps ms milliseconds; seconds on the monotonic clock. */
void qdt_sleep_ms(int ms);
double qdt_now_s(void);

#endif /* QDTEST_H */
