/* gguf_opts.c -- what `quant quantize` and `quant plan` share for the gguf layout: the rule set
 * (a file, or none when a mix alone decides) and llama.cpp's importance matrix as the run's
 * importance statistics.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "cli.h"
#include "quant_imatrix.h"

int cli_load_rules(const char *path, quant_ruleset **rules)
{
    quant_ck_error err;
    quant_ck_status st = path ? quant_ruleset_load(path, rules, &err)
                              : quant_ruleset_parse("[]", 2, "(no rules)", rules, &err);
    return st == QUANT_CK_OK ? CLI_EXIT_OK : cli_ck_error(&err);
}

int cli_load_imatrix(const char *path, quant_pipeline_options *opts, quant_imatrix **m)
{
    *m = NULL;
    if (!path) return CLI_EXIT_OK;
    quant_ck_error err;
    if (quant_imatrix_load(path, m, &err) != QUANT_CK_OK) return cli_ck_error(&err);
    opts->importance_given = true;
    opts->importance = quant_imatrix_entries(*m, &opts->n_importance);
    return CLI_EXIT_OK;
}
