/* qdtest.h -- what the daemon test suites share: the suites, the test kit (tests/kit/kit.h:
 * temporary directories, files, safetensors fixtures, the clock) and the two fixtures built on it
 * here (the integration helpers that start quantd live in qdproc.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QDTEST_H
#define QDTEST_H

#include <check.h>
#include <stddef.h>

#include "kit.h"

Suite *suite_store(void);
Suite *suite_store_pg(void);
Suite *suite_db(void);
Suite *suite_config(void);
Suite *suite_log(void);
Suite *suite_api(void);
Suite *suite_stats_store(void);
Suite *suite_stats_api(void);
Suite *suite_stats_log(void);
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
Suite *suite_inputs(void);
Suite *suite_startup(void);
Suite *suite_conns(void);
Suite *suite_gguf(void);
Suite *suite_torch(void);

/* kit_tmpdir("quantd-test"), failing the test when it cannot be made (caller frees the path;
 * kit_rmtree removes it). */
char *qdt_tmpdir(void);
/* kit_read_file (the whole file, NUL-terminated; *len its size when not NULL), failing the test
 * when it cannot be read. */
void *qdt_read_file(const char *path, size_t *len);
/* A safetensors file of n F32 tensors [rows, 4096] named layers.I.proj.weight, zeros, written
 * sparse (instant): a job on it runs for a while (8 x 8192 rows: 1 GiB). */
void qdt_make_big(const char *path, int n, long rows);

#endif /* QDTEST_H */
