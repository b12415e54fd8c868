/* main.c -- runs every checkpoint suite (safetensors, rules, pipeline, compressed-tensors, the
 * quant command, whole checkpoints end to end, static activation scales and the SRQ engine with
 * its statistics reader, the confinement of a
 * run's inputs, planning a run without running it, plans and unused rules, the microscaling
 * qtypes, the native-layout and compressed-tensors readers, SHA-256 taken while writing, inputs
 * still arriving, GGUF files); exit status 0 only when all pass. Run from the repository root
 * (fixtures are read from tests/data) with $QUANT_BIN naming the quant binary. CK_RUN_SUITE=name
 * runs one.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>

#include "ckutil.h"

int main(void)
{
    Suite *(*const suites[])(void) = {
        suite_st_read,           suite_st_write,    suite_rules,   suite_pipeline,
        suite_ctensors,          suite_cli,         suite_e2e,     suite_srq_ckpt,
        suite_srq_engine,        suite_confine,     suite_check,   suite_plan,
        suite_microscaling_ckpt, suite_native_read, suite_hash,    suite_kit,
        suite_stream_in,         suite_mse_ckpt,    suite_ct_read, suite_gguf,
        suite_gguf_mix,          suite_gguf_run};
    SRunner *sr = srunner_create(NULL);
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
        srunner_add_suite(sr, suites[i]());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
