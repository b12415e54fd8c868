/* ckutil.h -- helpers shared by the checkpoint suites: temporary directories, whole-file I/O,
 * raw safetensors files built from a header string, and the suite constructors main.c runs.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_CKUTIL_H
#define QUANT_CKUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant_ckpt.h"
#include "quant_pipeline.h"

/* A fresh directory under $TMPDIR (or /tmp); the caller frees the string and removes the tree
 * with ck_rmtree(). */
char *ck_tmpdir(void);
/* Removes `path` and everything under it (best effort). */
void ck_rmtree(const char *path);
/* "dir/name" in a malloc'd string. */
char *ck_join(const char *dir, const char *name);

/* A rule set from JSON text (fails the test when it does not parse). */
quant_ruleset *ck_rules(const char *json);
/* quant_quantize_path with the rule set in `rules_json`. */
quant_ck_status ck_quantize(const char *rules_json, const char *in, const char *out,
                            const quant_pipeline_options *o, quant_report **rep,
                            quant_ck_error *err);
/* Whether the safetensors file `path` holds tensor `name`. */
bool ck_has_tensor(const char *path, const char *name);
/* Writes `n` bytes to `path` (fails the test on error). */
void ck_write_file(const char *path, const void *data, size_t n);
/* Reads a whole file; *n gets its size. NULL when it cannot be read. Caller frees. */
void *ck_read_file(const char *path, size_t *n);
/* Writes a safetensors file: the 8-byte length of `header`, `header` itself, then `n` data
 * bytes. No validation: for building malformed files too. */
void ck_write_st(const char *path, const char *header, const void *data, size_t n);
/* Number of entries in directory `dir` (excluding . and ..), -1 if it cannot be opened. */
int ck_count_entries(const char *dir);
/* Directory of the test fixtures (tests/data, or $QUANT_CKPT_DATA). */
const char *ck_data_dir(void);

/* A tensor for ck_gen_file: raw little-endian data of `nbytes` bytes. */
typedef struct ck_gen_tensor {
    const char *name;
    const char *dtype; /* safetensors dtype name */
    int rank;
    int64_t shape[8];
    const void *data;
    size_t nbytes;
} ck_gen_tensor;
/* Writes a valid safetensors file (tensors in the given order, packed back to back) with
 * optional `__metadata__` given as JSON object text (or NULL). */
void ck_gen_file(const char *path, const ck_gen_tensor *t, size_t n, const char *meta_json);
/* Deterministic pseudo-random floats (roughly normal, spread `s`). */
void ck_fill(float *x, size_t n, uint64_t seed, float s);

Suite *suite_st_read(void);
Suite *suite_native_read(void);
Suite *suite_st_write(void);
Suite *suite_rules(void);
Suite *suite_pipeline(void);
Suite *suite_ctensors(void);
Suite *suite_cli(void);
Suite *suite_e2e(void);
Suite *suite_srq_ckpt(void);
Suite *suite_srq_engine(void);
Suite *suite_confine(void);
Suite *suite_check(void);
Suite *suite_plan(void);
Suite *suite_microscaling_ckpt(void);
Suite *suite_hash(void);

#endif
