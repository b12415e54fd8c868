/* cmd_plan.c -- `quant plan --rules RULES.json [--layout L] [--json] IN`: what `quant quantize`
 * would do with IN, decided from the headers alone (quant_plan_path: no tensor data is read,
 * nothing is written): a table of tensor, rule (or "copied: why"), qtype, scale shape and output
 * bytes, the totals and the unused rules; or, with --json, the library's plan document as is.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "quant_gguf_mix.h"
#include "quant_imatrix.h"

#define CMD "plan"

static const char usage[] =
    "usage: quant plan --rules RULES.json [options] IN\n"
    "\n"
    "Shows what 'quant quantize' would do with the safetensors file or checkpoint directory IN\n"
    "by the rules in RULES.json, from the headers alone (no tensor data is read, nothing is\n"
    "written): per tensor the rule that quantizes it or why it is copied, its qtype, scale shape\n"
    "and output bytes; the totals; and the unused rules (0-based indices of the rules that are\n"
    "the first match of no tensor). Fails, naming the file, tensor or rule, where the run would\n"
    "fail before its first tensor. Rules with act_static_scale or weight_importance are planned\n"
    "without statistics; their tensors are marked as needing them (quantize with --stats).\n"
    "\n"
    "options:\n"
    "  -r, --rules FILE       the rule set (required)\n"
    "  -l, --layout NAME      native (default), compressed-tensors or gguf\n"
    "  -m, --mix NAME         gguf: a llama-quantize mix (see quant quantize --help)\n"
    "      --imatrix FILE     gguf: an importance matrix (some mixes choose otherwise with one)\n"
    "      --vocab-from FILE  gguf from a Hugging Face directory: the GGUF vocabulary source\n"
    "  -j, --json             print the plan as JSON (the document POST /v1/plans returns)\n"
    "      --allow-nothing-quantized\n"
    "                         plan a run that quantizes no tensor (refused otherwise, as\n"
    "                         'quant quantize' refuses it)\n"
    "  -h, --help             this text\n";

typedef struct plan_args {
    const char *rules, *in, *imatrix;
    quant_pipeline_options opts;
    bool json;
} plan_args;

/* Parses argv into `a`; returns -1 to go on, or the exit status. */
static int parse_args(int argc, char **argv, plan_args *a)
{
    static const struct option longopts[] = {
        {"rules", required_argument, NULL, 'r'},
        {"layout", required_argument, NULL, 'l'},
        {"mix", required_argument, NULL, 'm'},
        {"imatrix", required_argument, NULL, 'i'},
        {"vocab-from", required_argument, NULL, 'V'},
        {"json", no_argument, NULL, 'j'},
        {"allow-nothing-quantized", no_argument, NULL, 256},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    quant_pipeline_options_init(&a->opts);
    /* no statistics in a plan: act_static_scale and weight_importance rules are planned, their
     * tensors marked as needing statistics */
    a->opts.allow_static_acts = true;
    opterr = 0;
    int c, rc;
    while ((c = getopt_long(argc, argv, ":r:l:m:i:V:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            a->rules = optarg;
            break;
        case 'l':
            if (!quant_layout_parse(optarg, &a->opts.layout))
                return cli_usage_error(
                    CMD, "unknown layout '%s' (native, compressed-tensors or gguf)", optarg);
            break;
        case 'm':
            if ((rc = cli_gguf_mix_opt(CMD, optarg, &a->opts)) >= 0) return rc;
            break;
        case 'i':
            a->imatrix = optarg;
            break;
        case 'V':
            a->opts.gguf_vocab = optarg;
            break;
        case 'j':
            a->json = true;
            break;
        case 256:
            a->opts.allow_nothing_quantized = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return CLI_EXIT_OK;
        default:
            return cli_getopt_error(CMD, c, argv);
        }
    }
    if ((rc = cli_gguf_check(CMD, a->rules, a->imatrix, &a->opts)) >= 0) return rc;
    if (argc - optind != 1)
        return cli_usage_error(CMD, "expected IN, got %d operands", argc - optind);
    a->in = argv[optind];
    return -1;
}

/* ---- the table ------------------------------------------------------------------------------ */

enum { COL_NAME, COL_RULE, COL_QTYPE, COL_SCALE, COL_BYTES, N_COLS };

typedef struct cells {
    const char *c[N_COLS];
    char rule[96], scale[QUANT_MAX_RANK * 22 + 4], bytes[32];
} cells;

static void entry_cells(const quant_plan_entry *e, cells *c)
{
    if (e->quantized && e->chosen_by) { /* gguf: blocks, no scale tensors */
        if (e->rule >= 0)
            snprintf(c->rule, sizeof c->rule, "rule %ld%s", e->rule,
                     strcmp(e->chosen_by, "fallback") ? "" : " (fallback)");
        else
            snprintf(c->rule, sizeof c->rule, "%s", e->chosen_by);
        snprintf(c->scale, sizeof c->scale, "-");
    } else if (e->quantized) {
        snprintf(c->rule, sizeof c->rule, "rule %ld%s", e->rule,
                 e->needs_statistics ? " (needs statistics)" : "");
        cli_fmt_shape(e->rank, e->scale_shape, c->scale, sizeof c->scale);
    } else {
        snprintf(c->rule, sizeof c->rule, "copied: %s", e->reason);
    }
    cli_fmt_bytes(e->bytes_out, c->bytes, sizeof c->bytes);
    c->c[COL_NAME] = e->name;
    c->c[COL_RULE] = c->rule;
    c->c[COL_QTYPE] = e->quantized ? quant_qtype_traits_get(e->qtype)->name : "-";
    c->c[COL_SCALE] = e->quantized ? c->scale : "-";
    c->c[COL_BYTES] = c->bytes;
}

typedef struct plan_rows {
    const quant_plan *plan;
    cells scratch; /* the row's cells, valid until the next row */
} plan_rows;

static void plan_row(void *user, size_t i, const char **out)
{
    plan_rows *t = user;
    entry_cells(quant_plan_entry_at(t->plan, i), &t->scratch);
    memcpy(out, t->scratch.c, sizeof t->scratch.c);
}

static void print_table(const quant_plan *p)
{
    static const char *const heads[N_COLS] = {"TENSOR", "RULE", "QTYPE", "SCALE SHAPE", "OUTPUT"};
    plan_rows t = {.plan = p};
    cli_print_table(heads, N_COLS, COL_BYTES, quant_plan_count(p), plan_row, &t);
}

/* The totals, the static activation scales, and one line per unused rule with its regex. */
static void print_totals(const quant_plan *p, const quant_ruleset *rules)
{
    size_t n = quant_plan_count(p), quantized = 0, n_unused;
    for (size_t i = 0; i < n; i++) quantized += quant_plan_entry_at(p, i)->quantized;
    uint64_t in = quant_plan_bytes_in(p), out = quant_plan_bytes_out(p);
    char bin[32], bout[32];
    cli_fmt_bytes(in, bin, sizeof bin);
    cli_fmt_bytes(out, bout, sizeof bout);
    printf("\n%zu tensor%s: %zu quantized, %zu copied (layout %s)\n", n, n == 1 ? "" : "s",
           quantized, n - quantized, quant_layout_name(quant_plan_layout(p)));
    if (quant_plan_static_count(p) > 0)
        printf("%zu static activation scale%s\n", quant_plan_static_count(p),
               quant_plan_static_count(p) == 1 ? "" : "s");
    printf("%s -> %s (%.1f%%)\n", bin, bout, in ? 100.0 * (double)out / (double)in : 100.0);
    size_t stats = 0;
    for (size_t i = 0; i < n; i++) stats += quant_plan_entry_at(p, i)->needs_statistics;
    if (stats > 0)
        printf("%zu tensor%s need%s calibration statistics (act_static_scale, weight_importance): "
               "quantize with --stats STATS.json\n",
               stats, stats == 1 ? "" : "s", stats == 1 ? "s" : "");
    const long *unused = quant_plan_unused_rules(p, &n_unused);
    if (n_unused == 0) printf("unused rules: none\n");
    for (size_t i = 0; i < n_unused; i++)
        printf("unused rule %ld: module_path \"%s\" is the first match of no tensor\n", unused[i],
               quant_ruleset_rule(rules, (size_t)unused[i])->module_path);
}

/* A tensor a server may fail to serve (compressed-tensors: no common vLLM kernel takes its group
 * size) is planned, and said so on stderr whatever the output format: one warning per rule,
 * naming its first tensor and how many more. */
static void warn_tensors(const quant_plan *p)
{
    size_t n = quant_plan_count(p);
    cli_tensor_warning *w = calloc(n ? n : 1, sizeof *w);
    if (!w) return; /* a warning only */
    for (size_t i = 0; i < n; i++) {
        const quant_plan_entry *e = quant_plan_entry_at(p, i);
        w[i] = (cli_tensor_warning){e->name, e->rule, e->warning};
    }
    cli_warn_tensors(w, n);
    free(w);
}

static int print_json(const quant_plan *p)
{
    return cli_put_text(quant_plan_json(p));
}

int cmd_plan(int argc, char **argv)
{
    plan_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    quant_ruleset *rules = NULL;
    quant_plan *plan = NULL;
    quant_imatrix *imatrix = NULL;
    quant_ck_error err;
    rc = cli_load_rules(a.rules, &rules);
    if (rc == CLI_EXIT_OK) rc = cli_load_imatrix(a.imatrix, &a.opts, &imatrix);
    if (rc != CLI_EXIT_OK) {
        quant_ruleset_free(rules);
        return rc;
    }
    if (quant_plan_path(rules, a.in, &a.opts, &plan, &err) != QUANT_CK_OK) {
        rc = cli_ck_error(&err);
    } else if (a.json) {
        warn_tensors(plan);
        rc = print_json(plan);
    } else {
        warn_tensors(plan);
        print_table(plan);
        print_totals(plan, rules);
        rc = CLI_EXIT_OK;
    }
    quant_plan_free(plan);
    quant_imatrix_free(imatrix);
    quant_ruleset_free(rules);
    return rc;
}
