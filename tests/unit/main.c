/* main.c -- runs every unit suite of libquant (Check); exit status 0 only when all pass.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>

#include "testutil.h"

int main(void)
{
    SRunner *sr = srunner_create(suite_qtype());
    srunner_add_suite(sr, suite_convert());
    srunner_add_suite(sr, suite_calibrate());
    srunner_add_suite(sr, suite_scale());
    srunner_add_suite(sr, suite_quantize());
    srunner_add_suite(sr, suite_pack());
    srunner_add_suite(sr, suite_props());
    srunner_add_suite(sr, suite_ctx());
    srunner_add_suite(sr, suite_microscaling());
    srunner_add_suite(sr, suite_mse());
    srunner_add_suite(sr, suite_onepass());
    srunner_add_suite(sr, suite_fold());
    srunner_add_suite(sr, suite_errq());
    srunner_add_suite(sr, suite_ggml_legacy());
    srunner_add_suite(sr, suite_ggml_kquants());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
