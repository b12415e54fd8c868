/* cli.h -- what the files of the `quant` command share: the subcommands' entry points, exit
 * codes, one-line errors on stderr, option value parsing, byte and duration formatting, and the
 * progress bar. Nothing here is part of a library.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_CLI_H
#define QUANT_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "quant_pipeline.h"

/* Exit statuses (man/quant.1, EXIT STATUS). */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* Subcommands: argv[0] is the command name, options and operands follow. Each returns an exit
 * status. */
int cmd_quantize(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_dequantize(int argc, char **argv);
/* `quant inspect` of a GGUF file (inspect_gguf.c): the text or JSON report; an exit status. */
int cli_inspect_gguf(const char *path, bool as_json);

/* The gguf layout's options (gguf_opts.c): the rule set at `path`, or an empty one when `path`
 * is NULL (a mix alone decides); llama.cpp's importance matrix at `path` (NULL: none) as the
 * importance statistics of `opts`, kept alive in `*m` (free with quant_imatrix_free). Both
 * return CLI_EXIT_OK or the exit status of the error they printed. */
typedef struct quant_imatrix quant_imatrix;
int cli_load_rules(const char *path, quant_ruleset **rules);
int cli_load_imatrix(const char *path, quant_pipeline_options *opts, quant_imatrix **m);
/* --mix NAME into opts (-1 to go on, or the usage error's exit status). */
int cli_gguf_mix_opt(const char *cmd, const char *name, quant_pipeline_options *opts);
/* The gguf options' combinations: --mix, --imatrix and --vocab-from only with the gguf layout;
 * --rules required unless a mix decides (-1 to go on, or the usage error's exit status). */
int cli_gguf_check(const char *cmd, const char *rules, const char *imatrix,
                   const quant_pipeline_options *opts);

/* ---- errors (util.c) ---------------------------------------------------------------------- */

/* Prints "quant: <message>\n" on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "quant: <cmd>: <message> (see 'quant <cmd> --help')" and returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for getopt_long()'s '?' (unknown option) or ':' (missing value) result. */
int cli_getopt_error(const char *cmd, int c, char **argv);
/* Prints a library error (its message already names the file, tensor or rule) and returns
 * CLI_EXIT_FAIL. */
int cli_ck_error(const quant_ck_error *err);

/* Prints a document (malloc'd JSON text, freed here) and a newline on stdout: CLI_EXIT_OK, or
 * "out of memory" and CLI_EXIT_FAIL when text is NULL. */
int cli_put_text(char *text);

/* Prints "quant: warning: <message>\n" on stderr. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A tensor's warning (a plan's or a report's entry). */
typedef struct cli_tensor_warning {
    const char *name;
    long rule;
    const char *warning; /* NULL: none */
} cli_tensor_warning;
/* One warning per rule among the n entries, in order of its first tensor: "tensor 'NAME' and N
 * more tensors of rule R: WARNING". */
void cli_warn_tensors(const cli_tensor_warning *w, size_t n);

/* ---- option values (util.c) --------------------------------------------------------------- */

/* A whole decimal integer in [min, max]. */
bool cli_parse_long(const char *s, long min, long max, long *out);
/* "--threads N": 0..QUANT_MAX_THREADS; prints the usage error itself when invalid. */
bool cli_parse_threads(const char *cmd, const char *s, int *out);

/* ---- formatting (util.c) ------------------------------------------------------------------ */

/* 1536 -> "1.5 KiB"; below 1 KiB: "512 B". */
/* Text tables (table.c): row(user, i, cells) fills cells[0..ncols) for row i (pointers valid until
 * the next call); columns from right_from on (and the last) are right-aligned. */
#define CLI_TABLE_MAX_COLS 16
typedef void (*cli_row_fn)(void *user, size_t row, const char **cells);
void cli_print_table(const char *const *heads, int ncols, int right_from, size_t nrows,
                     cli_row_fn row, void *user);
/* "[a, b]" into buf. */
void cli_fmt_shape(int rank, const int64_t *shape, char *buf, size_t cap);
void cli_fmt_bytes(uint64_t n, char *buf, size_t cap);
/* Seconds -> "0:07", "12:34", "1:02:03". */
void cli_fmt_duration(double seconds, char *buf, size_t cap);
/* Monotonic seconds since an arbitrary origin. */
double cli_now(void);
/* The directory part of `path` ("." when it has none), malloc'd; NULL on allocation failure. */
char *cli_dirname(const char *path);
/* "dir/name", malloc'd; NULL on allocation failure. */
char *cli_join(const char *dir, const char *name);
/* Removes the stale temporaries (quant_remove_stale_temps) of the directory holding `path`, and
 * of the one holding `also` when not NULL and different; one line on stderr for each temporary
 * removed or left ("quant: removed stale temporary DIR/OUT.quant-tmp-123-a1B2c3 (left by a run
 * that did not finish)"), whatever --quiet says: files vanish only with a word. */
void cli_clean_stale(const char *path, const char *also);

/* ---- the progress bar (progress.c) -------------------------------------------------------- */

typedef struct cli_progress {
    bool enabled;       /* stderr is a terminal and --quiet was not given */
    bool drawn;         /* something is on the current line */
    int width;          /* characters of the last line drawn */
    double start, last; /* cli_now() at init and at the last redraw */
    quant_progress p;   /* the latest state */
} cli_progress;

/* Starts the clock; the bar is drawn only when `enabled` and stderr is a terminal. */
void cli_progress_init(cli_progress *pr, bool enabled);
/* A quant_progress_fn: remembers the state, redraws at most ten times a second. */
void cli_progress_update(void *user, const quant_progress *p);
/* Draws the latest state and ends the line (when anything was drawn), so what follows on stderr
 * (the summary or an error) starts on a line of its own. */
void cli_progress_finish(cli_progress *pr);

#endif /* QUANT_CLI_H */
