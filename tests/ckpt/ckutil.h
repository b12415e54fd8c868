/* ckutil.h -- helpers shared by the checkpoint suites: the test kit's (tests/kit/kit.h) temporary
 * directories, files and safetensors fixtures wrapped to fail the test, rule sets, and the suite
 * constructors main.c runs.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_CKUTIL_H
#define QUANT_CKUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kit.h"
#include "quant_ckpt.h"
#include "quant_pipeline.h"

/* kit_tmpdir("quant-ckpt-test"), failing the test when it cannot be made; the caller frees the
 * string and removes the tree with kit_rmtree(). */
char *ck_tmpdir(void);

/* A rule set from JSON text (fails the test when it does not parse). */
quant_ruleset *ck_rules(const char *json);
/* quant_quantize_path with the rule set in `rules_json`. */
quant_ck_status ck_quantize(const char *rules_json, const char *in, const char *out,
                            const quant_pipeline_options *o, quant_report **rep,
                            quant_ck_error *err);
/* Whether the safetensors file `path` holds tensor `name`. */
bool ck_has_tensor(const char *path, const char *name);
/* kit_write_file, failing the test on error. */
void ck_write_file(const char *path, const void *data, size_t n);
/* kit_st_write_raw (a safetensors file from a header string, malformed ones too), failing the
 * test on error. */
void ck_write_st(const char *path, const char *header, const void *data, size_t n);
/* Number of entries in directory `dir` (excluding . and ..), -1 if it cannot be opened. */
int ck_count_entries(const char *dir);
/* Directory of the test fixtures (tests/data, or $QUANT_CKPT_DATA). */
const char *ck_data_dir(void);

/* kit_st_write (a valid safetensors file, tensors packed back to back in the given order, with
 * optional `__metadata__` given as JSON object text), failing the test on error. */
void ck_gen_file(const char *path, const kit_st_tensor *t, size_t n, const char *meta_json);
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
Suite *suite_kit(void);
Suite *suite_stream_in(void);
Suite *suite_mse_ckpt(void);
Suite *suite_ct_read(void);
Suite *suite_gguf(void);
Suite *suite_gguf_mix(void);
Suite *suite_gguf_run(void);

#endif
