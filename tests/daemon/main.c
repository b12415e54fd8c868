/* main.c -- the daemon test runner: unit suites (db, store, store_pg, config, log) and the
 * integration suite that starts the real quantd ($QUANTD_BIN) on a loopback port, with the run's
 * throwaway PostgreSQL (pgtest.h) around them. CK_RUN_SUITE picks one.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>

#include "pgtest.h"
#include "qdtest.h"

int main(void)
{
    SRunner *sr = srunner_create(suite_db());
    srunner_add_suite(sr, suite_store());
    srunner_add_suite(sr, suite_store_pg());
    srunner_add_suite(sr, suite_config());
    srunner_add_suite(sr, suite_log());
    srunner_add_suite(sr, suite_api());
    srunner_add_suite(sr, suite_stats_store());
    srunner_add_suite(sr, suite_stats_api());
    srunner_add_suite(sr, suite_stats_log());
    srunner_add_suite(sr, suite_srq());
    srunner_add_suite(sr, suite_openapi());
    srunner_add_suite(sr, suite_fsutil());
    srunner_add_suite(sr, suite_auth());
    srunner_add_suite(sr, suite_limits());
    srunner_add_suite(sr, suite_sources());
    srunner_add_suite(sr, suite_tls());
    srunner_add_suite(sr, suite_range());
    srunner_add_suite(sr, suite_http());
    srunner_add_suite(sr, suite_faults());
    srunner_add_suite(sr, suite_plans());
    srunner_add_suite(sr, suite_outputs());
    srunner_add_suite(sr, suite_examples());
    srunner_add_suite(sr, suite_inputs());
    srunner_add_suite(sr, suite_startup());
    srunner_add_suite(sr, suite_conns());
    srunner_add_suite(sr, suite_gguf());
    srunner_add_suite(sr, suite_torch());
    qdt_pg_start(); /* the PostgreSQL cases' cluster, when a suite that needs it runs */
    srunner_run_all(sr, CK_NORMAL);
    qdt_pg_stop();
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
