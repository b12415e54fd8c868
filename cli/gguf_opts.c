/* gguf_opts.c -- what `quant quantize` and `quant plan` share for the gguf layout: the rule set
 * (a file, or none when a mix alone decides) and llama.cpp's importance matrix as the run's
 * importance statistics.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "cli.h"
#include "quant_gguf_mix.h"
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

int cli_gguf_mix_opt(const char *cmd, const char *name, quant_pipeline_options *opts)
{
    if (!quant_gguf_mix_find(name))
        return cli_usage_error(cmd, "unknown mix '%s' (see quant quantize --help)", name);
    opts->gguf_mix = name;
    return -1;
}

int cli_gguf_check(const char *cmd, const char *rules, const char *imatrix,
                   const quant_pipeline_options *opts)
{
    bool gguf = opts->layout == QUANT_LAYOUT_GGUF;
    if (!gguf && (opts->gguf_mix || imatrix || opts->gguf_vocab))
        return cli_usage_error(cmd, "--mix, --imatrix and --vocab-from go with --layout gguf");
    if (!rules && !opts->gguf_mix)
        return cli_usage_error(cmd, gguf ? "--mix or --rules is required" : "--rules is required");
    return -1;
}
