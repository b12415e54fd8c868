/* cmd_quantize.c -- `quant quantize --rules RULES.json [--stats STATS.json] IN OUT`: options,
 * the rule set, the static activation scales (SRQ) from a statistics file through the library's
 * engine (quant_srq_compute, as a quantd job with a stats_model), stale temporaries removed and
 * the report target checked before the run, SIGINT and SIGTERM turned into the pipeline's cancel
 * flag, the run with its progress bar, the per-tensor report written next to the output, the
 * warnings (each unused rule with what it probably meant; nothing quantized, which the library
 * refuses unless --allow-nothing-quantized or the rule set allows it) and the summary on stderr.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "quant_gguf_mix.h"
#include "quant_imatrix.h"
#include "quant_srq.h"

#define CMD "quantize"

static const char usage[] =
    "usage: quant quantize --rules RULES.json [--stats STATS.json] [options] IN OUT\n"
    "       quant quantize --layout gguf [--mix NAME] [--rules RULES.json] [--imatrix FILE]\n"
    "                      [--stats STATS.json] [options] IN.gguf OUT.gguf\n"
    "\n"
    "Quantizes the safetensors file IN into the file OUT, or the checkpoint directory IN\n"
    "(sharded or not) into the directory OUT, by the rules in RULES.json; with --layout gguf,\n"
    "the GGUF file IN (llama.cpp's, e.g. the F16/BF16/F32 file its converter writes), or a\n"
    "Hugging Face Llama checkpoint directory IN (with --vocab-from), into the GGUF file OUT, each "
    "tensor's ggml type chosen by a llama-quantize mix (--mix) and the\n"
    "rules (a rule's weight_qtype q8_0 ... q6_k, iq4_nl, iq4_xs overrides the mix for the\n"
    "GGUF tensors whose module path, e.g. blk.0.attn_v, it matches). OUT must not exist\n"
    "(an empty directory is accepted; a symbolic link never is); nothing is left at OUT when\n"
    "the run fails. Temporaries that runs which died left in OUT's directory are removed first\n"
    "(each named on stderr).\n"
    "\n"
    "options:\n"
    "  -r, --rules FILE       the rule set (required)\n"
    "  -s, --stats FILE       calibration statistics for static activation scales (SRQ):\n"
    "                         quantd's GET /v1/models/MODEL/stats JSON, or a Qwix\n"
    "                         quant_stats dump in JSON ({ACT: {\"count\": n, \"sum_of_absmax\":\n"
    "                         ...}}); each activation gets the act_qtype of the first rule\n"
    "                         matching its module path when that rule has act_static_scale\n"
    "  -l, --layout NAME      native (default), compressed-tensors (a file run writes\n"
    "                         config.json with its quantization_config beside OUT too,\n"
    "                         from the one beside IN when there is one) or gguf\n"
    "  -m, --mix NAME         gguf: a llama-quantize mix (Q8_0, Q6_K, Q5_K_M, Q5_K_S,\n"
    "                         Q4_K_M, Q4_K_S, Q3_K_L, Q3_K_M, Q3_K_S, Q2_K, IQ4_NL, IQ4_XS,\n"
    "                         Q4_0, Q4_1, Q5_0, Q5_1, MXFP4_MOE, F16, BF16, F32); chooses\n"
    "                         each tensor's type as llama-quantize does (overrides the rule\n"
    "                         set's gguf_mix); without it only tensors a rule names change\n"
    "      --vocab-from FILE  gguf from a Hugging Face Llama directory: the GGUF file whose\n"
    "                         tokenizer the output takes (llama.cpp needs one to run it)\n"
    "      --imatrix FILE     gguf: llama.cpp's importance matrix (GGUF or legacy .dat),\n"
    "                         weighing each tensor's quantization as llama-quantize's\n"
    "                         --imatrix does (--stats gives importance from quantd's\n"
    "                         statistics instead)\n"
    "  -t, --threads N        worker threads, 0 = every CPU (default 0, at most 256)\n"
    "      --report FILE      where the per-tensor JSON report goes (default: "
    "OUT/quant-report.json\n"
    "                         for a directory, quant-report.json beside OUT for a file); a\n"
    "                         regular file is replaced, a link or anything else refused\n"
    "      --allow-nothing-quantized\n"
    "                         succeed even when no tensor is quantized (OUT is then IN\n"
    "                         copied); without it such a run fails before any work, naming\n"
    "                         the rules that match nothing (also: the rule set's\n"
    "                         \"allow_nothing_quantized\": true)\n"
    "      --no-quality       skip the SQNR and max error measurement (faster)\n"
    "      --chunk-mib N      input MiB per unit of work (default 16)\n"
    "  -q, --quiet            no progress bar, no summary\n"
    "  -h, --help             this text\n";

typedef struct quantize_args {
    const char *rules, *stats, *report, *in, *out, *imatrix;
    quant_pipeline_options opts;
    bool quiet;
} quantize_args;

enum { OPT_REPORT = 256, OPT_NO_QUALITY, OPT_CHUNK_MIB, OPT_IMATRIX, OPT_VOCAB, OPT_ALLOW_NOTHING };

/* Parses argv into `a`; returns -1 to go on, or the exit status. */
static int parse_args(int argc, char **argv, quantize_args *a)
{
    static const struct option longopts[] = {
        {"rules", required_argument, NULL, 'r'},
        {"stats", required_argument, NULL, 's'},
        {"layout", required_argument, NULL, 'l'},
        {"mix", required_argument, NULL, 'm'},
        {"imatrix", required_argument, NULL, OPT_IMATRIX},
        {"vocab-from", required_argument, NULL, OPT_VOCAB},
        {"threads", required_argument, NULL, 't'},
        {"report", required_argument, NULL, OPT_REPORT},
        {"no-quality", no_argument, NULL, OPT_NO_QUALITY},
        {"allow-nothing-quantized", no_argument, NULL, OPT_ALLOW_NOTHING},
        {"chunk-mib", required_argument, NULL, OPT_CHUNK_MIB},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    quant_pipeline_options_init(&a->opts);
    a->opts.map_input = true; /* the command's input is the user's own file */
    opterr = 0;
    int c, rc;
    long v;
    while ((c = getopt_long(argc, argv, ":r:s:l:m:t:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            a->rules = optarg;
            break;
        case 's':
            a->stats = optarg;
            break;
        case 'l':
            if (!quant_layout_parse(optarg, &a->opts.layout))
                return cli_usage_error(
                    CMD, "unknown layout '%s' (native, compressed-tensors or gguf)", optarg);
            break;
        case 'm':
            if ((rc = cli_gguf_mix_opt(CMD, optarg, &a->opts)) >= 0) return rc;
            break;
        case OPT_IMATRIX:
            a->imatrix = optarg;
            break;
        case OPT_VOCAB:
            a->opts.gguf_vocab = optarg;
            break;
        case 't':
            if (!cli_parse_threads(CMD, optarg, &a->opts.threads)) return CLI_EXIT_USAGE;
            break;
        case OPT_REPORT:
            a->report = optarg;
            break;
        case OPT_NO_QUALITY:
            a->opts.quality = false;
            break;
        case OPT_ALLOW_NOTHING:
            a->opts.allow_nothing_quantized = true;
            break;
        case OPT_CHUNK_MIB:
            if (!cli_parse_long(optarg, 1, 4096, &v))
                return cli_usage_error(CMD, "--chunk-mib must be an integer in 1..4096, not '%s'",
                                       optarg);
            a->opts.chunk_bytes = (size_t)v << 20;
            break;
        case 'q':
            a->quiet = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return CLI_EXIT_OK;
        default:
            return cli_getopt_error(CMD, c, argv);
        }
    }
    if ((rc = cli_gguf_check(CMD, a->rules, a->imatrix, &a->opts)) >= 0) return rc;
    if (a->imatrix && a->stats)
        return cli_usage_error(CMD, "--imatrix and --stats both give importance: choose one");
    if (argc - optind != 2)
        return cli_usage_error(CMD, "expected IN and OUT, got %d operand%s", argc - optind,
                               argc - optind == 1 ? "" : "s");
    a->in = argv[optind];
    a->out = argv[optind + 1];
    return -1;
}

/* ---- cancellation --------------------------------------------------------------------------- */

static atomic_int cancel_flag;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&cancel_flag, 1); /* lock-free: async-signal-safe */
}

/* SIGINT and SIGTERM raise the cancel flag once; a second signal acts as usual (kills). */
static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---- the report and the summary ------------------------------------------------------------- */

/* --report, or OUT/quant-report.json for a directory (IN a directory), or quant-report.json
 * beside a file. */
static char *report_path(const quantize_args *a, bool dir_run)
{
    if (a->report) return strdup(a->report);
    if (dir_run) return cli_join(a->out, "quant-report.json");
    char *dir = cli_dirname(a->out);
    char *path = dir ? cli_join(dir, "quant-report.json") : NULL;
    free(dir);
    return path;
}

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Before any work: stale temporaries of runs that died removed where this run writes, and a
 * report target the write would refuse (a link, a FIFO, a directory...) refused at once. The
 * report inside a new OUT directory needs no check. */
static int prepare(const quantize_args *a)
{
    bool dir_run = is_dir(a->in); /* links followed, as the run follows them */
    char *report = report_path(a, dir_run);
    if (!report) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    cli_clean_stale(a->out, a->report);
    quant_ck_error err;
    int rc = CLI_EXIT_OK;
    if ((a->report || !dir_run) && quant_check_output_file(report, true, &err) != QUANT_CK_OK)
        rc = cli_ck_error(&err);
    free(report);
    return rc;
}

static int write_report(const quantize_args *a, const quant_report *rep, char **written)
{
    char *path = report_path(a, is_dir(a->out));
    if (!path) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    quant_ck_error err;
    if (quant_report_write(rep, path, &err) != QUANT_CK_OK) {
        cli_error("report: %s", err.message);
        free(path);
        return CLI_EXIT_FAIL;
    }
    *written = path;
    return CLI_EXIT_OK;
}

/* With --stats: how many static activation scales went out, how many activations were skipped. */
static void print_static(const quant_report *rep)
{
    size_t written = quant_report_static_count(rep), skipped = quant_report_skipped_count(rep);
    fprintf(stderr, "static activation scales: %zu written, %zu activation%s skipped%s\n", written,
            skipped, skipped == 1 ? "" : "s", skipped ? " (the report says why)" : "");
}

/* With MSE calibrations (SPEC 9): the tensors searched, the groups whose scale shrank, and the
 * (importance-weighted) error before and after the search, summed over those tensors. */
static void print_mse(const quant_report *rep)
{
    size_t tensors = 0;
    int64_t groups = 0, shrunk = 0;
    double before = 0.0, after = 0.0;
    for (size_t i = 0; i < quant_report_count(rep); i++) {
        const quant_report_entry *e = quant_report_entry_at(rep, i);
        if (!e->has_mse) continue;
        tensors++;
        groups += e->mse_groups;
        shrunk += e->mse_shrunk;
        before += e->mse_err_before;
        after += e->mse_err_after;
    }
    if (!tensors) return;
    fprintf(stderr,
            "mse search: %zu tensor%s, %lld of %lld groups shrank, error %.6g -> %.6g (%.1f%%)\n",
            tensors, tensors == 1 ? "" : "s", (long long)shrunk, (long long)groups, before, after,
            before > 0 ? 100.0 * after / before : 100.0);
}

/* Four to six lines: counts, sizes and rate, the worst SQNR, the unused rules, the MSE search
 * (when one ran), the static activation scales (with --stats), where the report went. */
static void print_summary(const quantize_args *a, const quant_report *rep, double seconds,
                          const char *report)
{
    uint64_t in = 0, out = 0;
    size_t quantized = 0, n = quant_report_count(rep);
    const quant_report_entry *worst = NULL;
    for (size_t i = 0; i < n; i++) {
        const quant_report_entry *e = quant_report_entry_at(rep, i);
        in += e->bytes_in;
        out += e->bytes_out;
        quantized += e->quantized;
        if (e->quantized && e->has_quality && (!worst || e->sqnr_db < worst->sqnr_db)) worst = e;
    }
    char bin[32], bout[32], rate[32], took[24];
    cli_fmt_bytes(in, bin, sizeof bin);
    cli_fmt_bytes(out, bout, sizeof bout);
    cli_fmt_bytes(seconds > 0.0 ? (uint64_t)((double)in / seconds) : 0, rate, sizeof rate);
    snprintf(took, sizeof took, "%.2f s", seconds);
    fprintf(stderr, "quantized %zu tensor%s, copied %zu\n", quantized, quantized == 1 ? "" : "s",
            n - quantized);
    fprintf(stderr, "%s -> %s (%.1f%%) in %s, %s/s\n", bin, bout,
            in ? 100.0 * (double)out / (double)in : 100.0, took, rate);
    if (worst && isfinite(worst->sqnr_db))
        fprintf(stderr, "worst SQNR %.2f dB: %s\n", worst->sqnr_db, worst->name);
    else if (worst)
        fprintf(stderr, "worst SQNR: every quantized tensor is exact\n");
    size_t n_unused;
    const long *unused = quant_report_unused_rules(rep, &n_unused);
    fprintf(stderr, "unused rules:%s", n_unused ? "" : " none");
    for (size_t i = 0; i < n_unused; i++) fprintf(stderr, "%s %ld", i ? "," : "", unused[i]);
    fputc('\n', stderr);
    print_mse(rep);
    if (a->stats) print_static(rep);
    fprintf(stderr, "report: %s\n", report);
}

/* SPEC section 10: a run with unused rules succeeds and says so, with what a rule probably
 * meant; so does one allowed to quantize nothing. Printed whatever --quiet says (warnings are not
 * the summary). */
static void warn_unused(const quant_report *rep, const quant_ruleset *rules)
{
    size_t n_unused, quantized = 0;
    const long *unused = quant_report_unused_rules(rep, &n_unused);
    for (size_t i = 0; i < n_unused; i++) {
        const char *hint = quant_report_unused_hint(rep, i);
        cli_warn(
            "rule %ld (module_path \"%s\") is unused: it is the first match of no tensor%s%s%s",
            unused[i], quant_ruleset_rule(rules, (size_t)unused[i])->module_path,
            hint ? " (module paths are matched whole: did you mean '" : "", hint ? hint : "",
            hint ? "'?)" : "");
    }
    for (size_t i = 0; i < quant_report_count(rep); i++)
        quantized += quant_report_entry_at(rep, i)->quantized;
    if (quantized == 0)
        cli_warn("no tensor was quantized: every one of the %zu tensors was copied unchanged",
                 quant_report_count(rep));
}

/* The tensors written that a server may fail to serve (compressed-tensors: no common vLLM kernel
 * takes their group size): one warning per rule, naming its first tensor and how many more. */
static void warn_tensors(const quant_report *rep)
{
    size_t n = quant_report_count(rep);
    cli_tensor_warning *w = calloc(n ? n : 1, sizeof *w);
    if (!w) return; /* a warning only */
    for (size_t i = 0; i < n; i++) {
        const quant_report_entry *e = quant_report_entry_at(rep, i);
        w[i] = (cli_tensor_warning){e->name, e->rule, e->warning};
    }
    cli_warn_tensors(w, n);
    free(w);
}

/* ---- the command ---------------------------------------------------------------------------- */

/* On failure the partial report (the tensors done) is written only where --report asked. */
static int finish(const quantize_args *a, const quant_ruleset *rules, quant_ck_status st,
                  const quant_ck_error *err, const quant_report *rep, double seconds)
{
    char *written = NULL;
    if (st != QUANT_CK_OK) {
        if (a->report && rep) write_report(a, rep, &written);
        free(written);
        if (st == QUANT_CK_ERR_CANCELLED) {
            cli_error("cancelled");
            return CLI_EXIT_FAIL;
        }
        return cli_ck_error(err);
    }
    warn_unused(rep, rules);
    warn_tensors(rep);
    int rc = write_report(a, rep, &written);
    if (rc == CLI_EXIT_OK && !a->quiet) print_summary(a, rep, seconds, written);
    free(written);
    return rc;
}

static int run(quantize_args *a, const quant_ruleset *rules)
{
    cli_progress bar;
    cli_progress_init(&bar, !a->quiet);
    a->opts.progress = cli_progress_update;
    a->opts.progress_user = &bar;
    a->opts.cancel = &cancel_flag;
    catch_signals();

    quant_report *rep = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_quantize_path(rules, a->in, a->out, &a->opts, &rep, &err);
    double seconds = cli_now() - bar.start;
    cli_progress_finish(&bar);
    int rc = finish(a, rules, st, &err, rep, seconds);
    quant_report_free(rep);
    return rc;
}

/* --stats: the file's averaged statistics through the library's SRQ engine (as a quantd job's
 * stats_model), into the run's options; *srq stays NULL without --stats. */
static int static_scales(quantize_args *a, const quant_ruleset *rules, quant_srq **srq)
{
    *srq = NULL;
    if (!a->stats) return CLI_EXIT_OK;
    quant_stats *stats = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_stats_load(a->stats, &stats, &err);
    size_t n = 0;
    const quant_act_stat *acts = quant_stats_acts(stats, &n);
    if (st == QUANT_CK_OK &&
        (st = quant_srq_compute(acts, n, rules, NULL, srq, &err)) != QUANT_CK_OK)
        quant_ck_prefix(&err, "%s", a->stats);
    quant_stats_free(stats);
    if (st != QUANT_CK_OK) return cli_ck_error(&err);
    quant_srq_apply(*srq, &a->opts);
    return CLI_EXIT_OK;
}

int cmd_quantize(int argc, char **argv)
{
    quantize_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    quant_ruleset *rules = NULL;
    quant_srq *srq = NULL;
    quant_imatrix *imatrix = NULL;
    rc = cli_load_rules(a.rules, &rules);
    if (rc == CLI_EXIT_OK) rc = static_scales(&a, rules, &srq);
    if (rc == CLI_EXIT_OK) rc = cli_load_imatrix(a.imatrix, &a.opts, &imatrix);
    if (rc == CLI_EXIT_OK) rc = prepare(&a);
    if (rc == CLI_EXIT_OK) rc = run(&a, rules);
    quant_imatrix_free(imatrix);
    quant_srq_free(srq);
    quant_ruleset_free(rules);
    return rc;
}
