/* quant_pipeline.h -- the checkpoint engine: quantize a safetensors file or a sharded checkpoint
 * directory by a rule set (read -> quantize -> write, overlapped, in bounded memory), the
 * per-tensor report, and dequantization of a quantized checkpoint back to float.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The CLI (`quant`) and the daemon (`quantd`) both call quant_quantize_path(): one engine, two
 * front ends. Output appears only complete: files and directories are built under temporary
 * names and renamed into place; a failed or cancelled run leaves nothing behind.
 */
#ifndef QUANT_PIPELINE_H
#define QUANT_PIPELINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant_ckpt.h"
#include "quant_rules.h"
#include "quant_st.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Output layouts. */
typedef enum quant_layout {
    QUANT_LAYOUT_NATIVE = 0,   /* NAME.qvalue / NAME.scale / NAME.zero_point */
    QUANT_LAYOUT_CTENSORS = 1, /* compressed-tensors (vLLM): P.weight[_packed] / P.weight_scale */
    QUANT_LAYOUT_GGUF = 2      /* one GGUF file (llama.cpp) of ggml block types: gguf_run.c */
} quant_layout;

/*! quant_layout_parse() : "native", "compressed-tensors" or "gguf"; false if unknown. */
QUANT_API bool quant_layout_parse(const char *name, quant_layout *out);
/*! quant_layout_name() : the inverse; NULL if out of range. */
QUANT_API const char *quant_layout_name(quant_layout layout);

/* Progress, reported after every unit of work (from the calling thread). */
typedef struct quant_progress {
    uint64_t tensors_done, tensors_total; /* over the whole run (all shards) */
    uint64_t bytes_done, bytes_total;     /* input data bytes */
    const char *shard;                    /* file being processed (base name) */
} quant_progress;

typedef void (*quant_progress_fn)(void *user, const quant_progress *p);

/* A static activation scale (SRQ), computed by the caller from
 * calibration statistics, to be written with the quantized weights. */
typedef struct quant_static_act {
    const char *name;        /* the activation as the statistics name it (report); may be NULL */
    const char *tensor_base; /* output base name with '.' separators ("model.layers.0.mlp.
                                dot_general0_lhs"): written as BASE_scale and BASE_zero_point; its
                                module path is the base less its last component */
    long rule;               /* the rule whose act_qtype gave `qtype`; -1 for none */
    quant_qtype qtype;
    int rank; /* the calibration's shape (0: a scalar) */
    int64_t shape[QUANT_MAX_RANK];
    const float *scale;        /* numel(shape) positive finite values */
    const int32_t *zero_point; /* numel(shape) values in [qmin, qmax]; NULL when symmetric */
    int64_t count;             /* the statistics' count it comes from (report); 0: not known */
} quant_static_act;

/* An activation with statistics that got no static scale, and why (quant_srq_compute(); the
 * report lists them). */
typedef struct quant_skipped_act {
    const char *name;
    long rule;          /* the first rule matching its module path, -1 for none */
    const char *reason; /* "no rule matches module path 'm.x'", ... */
} quant_skipped_act;

/* An importance statistic a weight_importance rule may take: an activation's averaged
 * mean_sq (rounded once to float32), found by its module path (the activation name with '/'
 * read as '.', less the last component) and its length. */
typedef struct quant_importance {
    const char *act;         /* the activation's name, for messages */
    const char *module_path; /* e.g. "model.layers.0.mlp.up_proj" */
    const float *w;          /* n finite values >= 0 */
    int64_t n;
} quant_importance;

/* Inputs that are still arriving (a server quantizing an upload while its bytes come in).
 * Before the run reads bytes of an input file it calls the wait function with the file's name
 * under the input directory (a file run: the base name of `in`) and `end`: the bytes [0, end)
 * it is about to read, or QUANT_INPUT_WHOLE for the complete file (before it takes a file's size:
 * the index, config.json and the other files copied, and a shard after its last tensor, whose
 * size is then checked against its header). It returns true once those bytes are on disk, false
 * when they never will be (the upload failed, was cut or timed out), with a reason in why
 * (NUL-terminated, at most why_len bytes, no server path in it): the run then fails with
 * QUANT_CK_ERR_IO naming the file (and the tensor it was reading) and that reason. It may block;
 * it is called from the run's threads, one call at a time per file. Every input file must exist
 * (perhaps empty) when the run starts.
 *
 * What the run asks, in order (so a client should send the small files first):
 *  - a directory: the index (when the directory has one) whole, then each shard's 8-byte length
 *    prefix and its header (end 8, then 8 + length) in the index's (or name) order; with the
 *    compressed-tensors layout config.json whole (it is validated before any tensor is read).
 *    A shard's size is not taken when it is opened: the header gives its data's end, and an
 *    empty or short *.safetensors file is not refused for it;
 *  - compressed-tensors nvfp4 only: every nvfp4 tensor of every shard (its global scale comes
 *    from the whole tensor, or its fused group, before any shard is written);
 *  - then shard by shard, tensor by tensor in file order, each unit of work (up to chunk_bytes)
 *    waits for its own end offset just before its pread: a tensor is quantized as soon as its
 *    last byte is confirmed, while later bytes still arrive; after a shard's last tensor, the
 *    shard whole, then its size is checked (a longer or shorter file fails as quant_st_open()
 *    would: QUANT_CK_ERR_FORMAT "N trailing bytes ..." / "file is truncated ...");
 *  - at the end (a directory), each other file copied (config.json in the native layout too)
 *    whole.
 * A file is never read past what the wait confirmed. Messages: "IN/NAME: tensor 'T': input
 * stopped before byte N arrived: REASON", "IN/NAME: input stopped before the whole file arrived:
 * REASON" (a file run: "IN: ..."). After each wait returns true the run checks opts->cancel (a
 * wait function may set it and return). A run that fails otherwise (bad data, a write error)
 * asks for nothing more, but returns only once a wait in progress returns: at most one unit of
 * work later, or when the wait gives up (bound it, or watch opts->cancel). quant_check_path() and
 * quant_plan_path() make the same waits for what they read (the index, the headers, config.json): a
 * server may plan a job as its headers arrive. quant_plan_file() ignores input_wait (its file is
 * open already). With input_wait NULL the run never calls it and reads as before. */
#define QUANT_INPUT_WHOLE UINT64_MAX
typedef bool (*quant_input_wait_fn)(void *user, const char *name, uint64_t end, char *why,
                                    size_t why_len);

typedef struct quant_pipeline_options {
    int threads;                /* libquant worker threads; 0 = every CPU the process may use */
    quant_layout layout;        /* default QUANT_LAYOUT_NATIVE */
    bool quality;               /* SQNR and max error per tensor (default true) */
    size_t chunk_bytes;         /* input bytes per unit of work (default 16 MiB, min 64 KiB) */
    int buffers;                /* units in flight per stage (default 3, 1..64) */
    quant_progress_fn progress; /* may be NULL */
    void *progress_user;
    atomic_int *cancel; /* when not NULL and set non-zero, the run stops with CANCELLED */
    /* Read the tensors to quantize through a read-only mapping of the input instead of copying
     * them (default false). Faster, but a file that another process truncates during the run
     * kills the process with SIGBUS: only for inputs nobody else writes to. */
    bool map_input;
    /* Static activation scales (SRQ). With allow_static_acts (or n_static_acts > 0) a rule with
     * act_static_scale is accepted (without, such a rule is refused: the run has no calibration
     * statistics). Each activation's tensors go, in the native layout, into the shard holding the
     * first tensor whose name starts with its module path + "." (else the last shard); in the
     * compressed-tensors layout they become P.input_scale (and P.input_zero_point) of the
     * quantized weight P.weight of that module path, which must exist (QUANT_CK_ERR_UNSUPPORTED
     * otherwise). The array is borrowed for the call. A plan or check (quant_check_path(),
     * quant_plan_path(), quant_plan_file()) with allow_static_acts and no static_acts stands for
     * a run whose scales statistics will give later (a quantd job with a stats_model): there,
     * compressed-tensors' need of an input_scale for every weight of an act_static_scale rule is
     * left to the run, which checks it with the scales it is given. */
    bool allow_static_acts;
    const quant_static_act *static_acts;
    size_t n_static_acts;
    /* The activations whose statistics gave no static scale, for the report (borrowed, like
     * static_acts). quant_srq_apply() (quant_srq.h) sets all of these from quant_srq_compute(). */
    const quant_skipped_act *skipped_acts;
    size_t n_skipped_acts;
    /* Importance statistics for rules with weight_importance, borrowed for the call.
     * With importance_given, each such weight takes the one entry whose module path is its own
     * and whose length is its contraction dim (none or several: an error naming the weight);
     * without it such a rule is an error, except in a plan or check with allow_static_acts (the
     * statistics come later, as for static_acts). quant_srq_apply() sets these too. */
    bool importance_given;
    const quant_importance *importance;
    size_t n_importance;
    /* The directory `in` is resolved under (openat semantics; default AT_FDCWD). Borrowed: the
     * run neither closes nor moves it. Without no_symlinks an absolute `in` ignores it. */
    int input_dir_fd;
    /* Confinement for a server (default false: links are followed, as the CLI needs for Hugging
     * Face cache snapshots). When true, `in` must be plain components relative to input_dir_fd
     * (no leading '/', no empty, "." or ".." component, no trailing '/'), opened one component
     * at a time with O_NOFOLLOW as quant_open_beneath() does, and every file the run reads under
     * it (shards, index, config.json, the other files copied, the directory listing) is opened
     * relative to the input directory's descriptor with O_NOFOLLOW: a symbolic link anywhere
     * fails the run with QUANT_CK_ERR_ACCESS naming it ("in/config.json: a symbolic link ..."),
     * the other files being checked before any data is read. Hard links are not refused (a hard
     * link is the file itself). Either way only regular files are read (a FIFO never blocks):
     * a shard or the index that is not one is an error, other such entries are skipped. Messages
     * name inputs as `in` + "/" + entry, so a root-relative `in` keeps server paths out. */
    bool no_symlinks;
    /* Compute each output file's SHA-256 while writing it (default false): the shards through
     * quant_st_writer_hash() (a thread per shard, reading back from the page cache, finished
     * during the fsync), the small files (index, config.json, the other files copied) from the
     * bytes as they are written. The report's outputs (quant_report_output_at) then carry it,
     * so a front end that needs the hashes (quantd's ETags) never reads the outputs again. */
    bool sha256;
    /* A run (or plan, or check) in which no tensor would be quantized fails before any data is
     * read (QUANT_CK_ERR_RULES, naming the unused rules and what they probably meant) unless
     * this, or the rule set's "allow_nothing_quantized" (quant_rules.h), allows it (default
     * false): the output would be the input copied, which vLLM loads unquantized. */
    bool allow_nothing_quantized;
    /* Inputs still arriving (see quant_input_wait_fn; default NULL: every input is complete).
     * Not with map_input (QUANT_CK_ERR_ARG). */
    quant_input_wait_fn input_wait;
    void *input_wait_user;
    /* The gguf layout: a llama-quantize mix (quant_gguf_mix.h: "Q4_K_M", ...) choosing each
     * tensor's type before the rules override it; NULL: the rule set's "gguf_mix", else none
     * (only tensors a rule names are quantized). */
    const char *gguf_mix;
    /* The gguf layout over a Hugging Face checkpoint directory: the GGUF file whose tokenizer.*
     * pairs the output takes (llama.cpp cannot run a model without its vocabulary; any GGUF of
     * the same model family and vocabulary, e.g. llama.cpp's converter's F16 file). A path as
     * given (the caller's, not under input_dir_fd); required for a checkpoint input. */
    const char *gguf_vocab;
} quant_pipeline_options;

/*! quant_pipeline_options_init() : the defaults above. */
QUANT_API void quant_pipeline_options_init(quant_pipeline_options *o);

/* ---- the report ------------------------------------------------------------------------------ */

/* What happened to one input tensor. */
typedef struct quant_report_entry {
    const char *name;  /* input tensor name */
    const char *shard; /* input file base name */
    bool quantized;
    const char
        *reason;       /* why it was copied ("no rule matched", "rank 1", ...); NULL if quantized */
    long rule;         /* matching rule index, -1 when none */
    quant_qtype qtype; /* when quantized */
    quant_st_dtype dtype;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    int64_t scale_shape[QUANT_MAX_RANK]; /* same rank; when quantized */
    uint64_t bytes_in, bytes_out;        /* data bytes read, data bytes written (all outputs) */
    bool has_quality;
    double sqnr_db;     /* 10 log10(sum x^2 / sum (x - fake_quant(x))^2); +inf when exact */
    double max_abs_err; /* max |x - fake_quant(x)| */
    /* an MSE calibration: the importance-weighted error sum_j w_j (x_j - deq_j)^2 over
     * the tensor with the plain scales (k = 0) and with the chosen ones; groups searched and how
     * many of them shrank; the activation whose mean_sq weighed it (NULL: all weights 1) */
    bool has_mse;
    double mse_err_before, mse_err_after;
    int64_t mse_groups, mse_shrunk;
    const char *importance_act;
    /* compressed-tensors: what a server would make of it when it may fail to serve it (vLLM has
     * a scheme but its common kernels do not take the group size); NULL: nothing to say */
    const char *warning;
} quant_report_entry;

typedef struct quant_report quant_report;

/*! quant_report_count(), quant_report_entry_at() : the entries in processing order. */
QUANT_API size_t quant_report_count(const quant_report *r);
QUANT_API const quant_report_entry *quant_report_entry_at(const quant_report *r, size_t i);

/* A static activation scale the run wrote (quant_static_act). */
typedef struct quant_report_static_act {
    const char *name;       /* quant_static_act.name, else its tensor base */
    const char *shard;      /* output file base name */
    const char *scale;      /* the tensor written: BASE_scale, or P.input_scale */
    const char *zero_point; /* BASE_zero_point / P.input_zero_point, or NULL (symmetric) */
    long rule;
    quant_qtype qtype;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    int64_t count; /* quant_static_act.count (0: not known) */
} quant_report_static_act;

/*! quant_report_static_count(), quant_report_static_at() : the static activation scales written,
 * in output order (shard by shard). */
QUANT_API size_t quant_report_static_count(const quant_report *r);
QUANT_API const quant_report_static_act *quant_report_static_at(const quant_report *r, size_t i);

/*! quant_report_skipped_count(), quant_report_skipped_at() : the activations skipped
 * (quant_pipeline_options.skipped_acts, copied), in their order. */
QUANT_API size_t quant_report_skipped_count(const quant_report *r);
QUANT_API const quant_skipped_act *quant_report_skipped_at(const quant_report *r, size_t i);

/* An output file a successful run published. */
typedef struct quant_report_output {
    const char *name;   /* its name in the output directory; a file run: the output's base name
                         * (and config.json beside it, compressed-tensors) */
    uint64_t bytes;     /* its size */
    const char *sha256; /* 64 lowercase hex digits, as sha256sum prints; NULL without opts.sha256 */
} quant_report_output;

/*! quant_report_output_count(), quant_report_output_at() : the files a successful run wrote,
 * in the order it wrote them (the shards, then the other files copied, config.json, the index);
 * none after a failed run (it leaves nothing behind). Owned by the report. */
QUANT_API size_t quant_report_output_count(const quant_report *r);
QUANT_API const quant_report_output *quant_report_output_at(const quant_report *r, size_t i);

/*! quant_report_unused_rules() :
 * The rules that were the first match of no tensor of the run (Qwix's
 * get_unused_rules): 0-based indices, ascending; `*n` gets their number. Every input tensor
 * counts, whether it was then quantized or copied (rank < 2, not a float). Decided when the run
 * is planned, so a failed run's report has them too. NULL when there are none.
 * Owned by the report. */
QUANT_API const long *quant_report_unused_rules(const quant_report *r, size_t *n);

/*! quant_report_unused_hint() :
 * For the i-th unused rule (i < the count quant_report_unused_rules() gives): the regex it
 * probably meant, when its module_path with ".*" put before it matches a module path of the run
 * (module_path "q_proj" -> ".*q_proj": module paths are matched whole), else NULL. Owned by the
 * report. */
QUANT_API const char *quant_report_unused_hint(const quant_report *r, size_t i);

/*! quant_report_json() :
 * The report as JSON text (`{"format":"quantd.report/1","layout":..,"tensors":[..],
 * "summary":{..,"unused_rules":[..]}}`, plus
 * `"static_activations":{"written":[{"name","shard","rule","qtype",
 * "shape","scale","zero_point"[,"count"]}],"skipped":[{"name","rule","reason"}]}` when the run
 * allowed static activation scales; "count" when known), malloc'd; NULL on allocation failure. */
QUANT_API char *quant_report_json(const quant_report *r);

/*! quant_report_write() :
 * Writes quant_report_json() to `path` atomically (a temporary beside it, fsync, rename): over
 * nothing or a regular file only (see quant_check_output_file(): a link, FIFO, device or directory
 * is refused with QUANT_CK_ERR_ACCESS and left as it is). */
QUANT_API quant_ck_status quant_report_write(const quant_report *r, const char *path,
                                             quant_ck_error *err);

/*! quant_report_free() : NULL is a no-op. */
QUANT_API void quant_report_free(quant_report *r);

/* ---- outputs: regular files only; the temporaries of runs that died --------------------------
 *
 * Every output the library writes by name (a shard, a report, an index, config.json, an output
 * directory) is built under a temporary name beside it and renamed into place, after the target
 * is checked with lstat (links not followed) as quant_check_output_file() does: an output file
 * goes over nothing or a regular file, an output directory over nothing or an empty directory;
 * a symbolic link is refused -- never written through, never replaced -- and so is a FIFO, a
 * device, a socket, or a directory where a file is expected. Where the filesystem allows it the
 * rename over nothing is RENAME_NOREPLACE, so a name taken meanwhile is not replaced either.
 *
 * Temporaries are named after their creator: NAME.quant-tmp-PID-XXXXXX (files) and
 * OUT.quant-partial-PID-XXXXXX (directories), PID the creating process, XXXXXX six letters or
 * digits; the creator holds an exclusive flock() on each from creation until it is renamed or
 * removed. A killed process (kill -9, a second Ctrl-C) leaves them behind; its locks die with
 * it. */

/*! quant_check_output_file() :
 * Whether `path` may receive an output file, checked as described above: nothing there, or with
 * `replace` a regular file. For a front end to refuse a target before a long run (the write
 * checks again).
 * @return : QUANT_CK_OK; QUANT_CK_ERR_ACCESS for a symbolic link ("PATH: a symbolic link (outputs
 *           are never written through or over a link: ...)") or anything but a regular file
 *           ("PATH: not a regular file (a FIFO); ..."); QUANT_CK_ERR_ARG when it exists and
 *           `replace` is false ("PATH: output already exists ...") or `path` is NULL;
 *           QUANT_CK_ERR_IO when lstat fails otherwise. */
QUANT_API quant_ck_status quant_check_output_file(const char *path, bool replace,
                                                  quant_ck_error *err);

/* A temporary quant_remove_stale_temps() found. */
typedef struct quant_stale_temp {
    const char *path;     /* dir + "/" + its name */
    bool is_dir;          /* an OUT.quant-partial-... directory */
    bool removed;         /* false: left in place, and why: */
    const char *kept_why; /* "it belongs to another user", "cannot remove it: ...", ... */
} quant_stale_temp;

/* Called for each temporary removed or left (strings valid during the call only). */
typedef void (*quant_stale_fn)(void *user, const quant_stale_temp *t);

/*! quant_remove_stale_temps() :
 * Removes from the directory `dir` the temporaries of the library's writers (names as above:
 * files NAME.quant-tmp-PID-XXXXXX, directories NAME.quant-partial-PID-XXXXXX; links and other
 * types are never touched) that are provably stale: owned by the effective user, locked by no
 * process (an exclusive flock() is taken on it without waiting, and held while it is removed),
 * and either their creator PID is no live process on this machine or they have not changed for
 * 15 minutes (a directory: nor any entry directly in it), which covers a PID reused since. A
 * directory shared with another machine (or PID namespace) whose locks do not reach this one
 * makes its live runs look dead here: not supported. A temporary some process holds locked is a
 * live run's: left without a word. Any other temporary of ours that cannot be proven stale (another
 * user's, no locks on the filesystem, a creator PID alive and a recent change) is left and
 * reported. `fn` (may be NULL) hears of each removed or left; the library prints nothing. A missing
 * `dir` is no error.
 * @return : QUANT_CK_OK, QUANT_CK_ERR_IO when `dir` cannot be listed, QUANT_CK_ERR_ARG. */
QUANT_API quant_ck_status quant_remove_stale_temps(const char *dir, quant_stale_fn fn, void *user,
                                                   quant_ck_error *err);

/* ---- running it --------------------------------------------------------------------------------
 */

/*! quant_quantize_path() :
 * Quantizes `in` into `out` by `rules`:
 *  - a file (`*.safetensors`) -> the file `out`;
 *  - a directory (a sharded checkpoint: model.safetensors.index.json, or every *.safetensors in
 *    it) -> the directory `out` (which must not exist, or be empty) with the same shard names, a
 *    rewritten index (metadata.total_size, weight_map with the output tensor names), the other
 *    regular files copied (config.json gets a quantization_config in the compressed-tensors
 *    layout). Shards are processed one after another, tensors in file order.
 * `in` is resolved under opts->input_dir_fd; with opts->no_symlinks no input is read through a
 * symbolic link (see the options). `out` is a path as given (the caller's own directory).
 * `*report` (when `report` is not NULL) receives the per-tensor report, also on failure (then it
 * holds the tensors done so far), to free with quant_report_free().
 * @return : QUANT_CK_OK, or an error naming the file, tensor or rule (QUANT_CK_ERR_ACCESS: a link
 *           or a path the confinement refuses); nothing is left at `out`. */
QUANT_API quant_ck_status quant_quantize_path(const quant_ruleset *rules, const char *in,
                                              const char *out, const quant_pipeline_options *opts,
                                              quant_report **report, quant_ck_error *err);

/*! quant_check_path() :
 * Everything quant_quantize_path() does before it reads tensor data, and nothing else: the
 * shards (or the file) opened and validated, every tensor planned by `rules` for `opts`'s layout
 * (a rule the layout cannot express, a tile that does not divide its dimension, an
 * act_static_scale rule without allow_static_acts), the index and the other files looked at,
 * under `opts`'s input_dir_fd / no_symlinks. Reads headers only; writes nothing. For a server
 * that must refuse a job when it is asked for it, not when it runs.
 * @return : QUANT_CK_OK, or the error quant_quantize_path() would have failed with first. */
QUANT_API quant_ck_status quant_check_path(const quant_ruleset *rules, const char *in,
                                           const quant_pipeline_options *opts, quant_ck_error *err);

/* ---- plans ------------------------------------------------------------------------------------
 *
 * A plan is what quant_quantize_path() would do, decided before any tensor data is read: per
 * input tensor, the rule that decides it (or why it is copied), its qtype, scale shape and output
 * tensors with their dtypes, shapes and bytes; the totals; the unused rules. It comes from the
 * planner the run itself uses (the same shard plans), so a plan and the run it describes agree. */

/* One output tensor a plan writes. */
typedef struct quant_plan_output {
    const char *name;
    quant_st_dtype dtype;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    uint64_t bytes;
} quant_plan_output;

/* What the run would do with one input tensor. */
typedef struct quant_plan_entry {
    const char *name;      /* input tensor name */
    const char *shard;     /* input file base name */
    bool quantized;        /* quantized, or copied unchanged */
    const char *reason;    /* copied: why ("no rule matched", "rank < 2", ...); NULL if quantized */
    long rule;             /* the rule that decides it (as the report's rule), -1 when none does */
    long first_match;      /* the first rule whose module_path matches, -1 for none: the one that
                              counts for unused rules, also for a tensor copied for its rank or dtype */
    bool needs_statistics; /* a plan made without statistics (allow_static_acts, no static_acts)
                              of a weight whose rule needs them: act_static_scale (its module's
                              input activation) or weight_importance (its mean_sq) */
    quant_qtype qtype;     /* when quantized */
    quant_st_dtype dtype;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    int64_t scale_shape[QUANT_MAX_RANK]; /* same rank; when quantized */
    uint64_t bytes_in, bytes_out;        /* data bytes read, data bytes written (all outputs) */
    size_t n_outputs;
    const quant_plan_output *outputs; /* the copy itself, or qvalue / scale / zero point ... */
    /* gguf layout: what chose the ggml type (static text: "mix", "mix rule" for the mix's layer,
     * output and embedding rules, "rule" for a rule's weight_qtype, "fallback" when the type
     * chosen cannot hold the row length and llama-quantize's fallback replaced it); NULL in the
     * other layouts */
    const char *chosen_by;
    const char *warning; /* as quant_report_entry.warning */
} quant_plan_entry;

/* A static activation scale (quant_pipeline_options.static_acts) the run would write. */
typedef struct quant_plan_static {
    const char *name;  /* quant_static_act.name, else its tensor base */
    const char *shard; /* the shard (input base name) it is written with */
    size_t n_outputs;
    const quant_plan_output *outputs;
} quant_plan_static;

typedef struct quant_plan quant_plan;

/*! quant_plan_path() :
 * Plans `in` (a file or a checkpoint directory, as quant_quantize_path() takes it) by `rules`
 * for `opts` (layout, chunk size, static activation scales, input_dir_fd / no_symlinks; NULL:
 * the defaults): everything quant_check_path() checks, reading headers only and writing nothing.
 * @return : QUANT_CK_OK with `*out` to free with quant_plan_free(); otherwise the error
 *           quant_quantize_path() would have failed with first, `*out` NULL. */
QUANT_API quant_ck_status quant_plan_path(const quant_ruleset *rules, const char *in,
                                          const quant_pipeline_options *opts, quant_plan **out,
                                          quant_ck_error *err);

/*! quant_plan_file() :
 * quant_plan_path() for one safetensors file already open (borrowed: neither closed nor read
 * beyond its header), as a run over that file alone would plan it (no index, no other files);
 * `f` may come from quant_st_open_header_fd() (a header without its data, as POST /v1/plans
 * takes an uploaded shard). opts->input_dir_fd and no_symlinks do not apply.
 * @return : as quant_plan_path(). */
QUANT_API quant_ck_status quant_plan_file(const quant_ruleset *rules, quant_st_file *f,
                                          const quant_pipeline_options *opts, quant_plan **out,
                                          quant_ck_error *err);

/*! quant_plan_count(), quant_plan_entry_at() : the input tensors, shard by shard in file order
 * (the order the run processes them). Entries are owned by the plan. */
QUANT_API size_t quant_plan_count(const quant_plan *p);
QUANT_API const quant_plan_entry *quant_plan_entry_at(const quant_plan *p, size_t i);

/*! quant_plan_static_count(), quant_plan_static_at() : the static activation scales. */
QUANT_API size_t quant_plan_static_count(const quant_plan *p);
QUANT_API const quant_plan_static *quant_plan_static_at(const quant_plan *p, size_t i);

/*! quant_plan_bytes_in(), quant_plan_bytes_out() : the tensor data bytes the run would read and
 * write (static activation scales included in the output). */
QUANT_API uint64_t quant_plan_bytes_in(const quant_plan *p);
QUANT_API uint64_t quant_plan_bytes_out(const quant_plan *p);

/*! quant_plan_layout() : the layout planned for. */
QUANT_API quant_layout quant_plan_layout(const quant_plan *p);

/*! quant_plan_unused_rules() : as quant_report_unused_rules(), for the planned run. */
QUANT_API const long *quant_plan_unused_rules(const quant_plan *p, size_t *n);

/*! quant_plan_json() :
 * The plan as JSON text, malloc'd (NULL on allocation failure): `{"format":"quantd.plan/1",
 * "layout":..,"tensors":[{"name","shard","action":"quantized"|"copied","rule","first_match",
 * "dtype","shape","bytes_in","bytes_out","outputs":[{"name","dtype","shape","bytes"}],
 * "reason" (copied) | "qtype","scale_shape" (quantized)}],"summary":{"tensors","quantized",
 * "copied","bytes_in","bytes_out","unused_rules":[..]}}`, plus `"static_activations":[{"name",
 * "shard","outputs"}]` when there are any. The CLI (`quant plan --json`) and the daemon
 * (POST /v1/plans) both print this document. */
QUANT_API char *quant_plan_json(const quant_plan *p);

/*! quant_plan_free() : NULL is a no-op. */
QUANT_API void quant_plan_free(quant_plan *p);

/*! quant_open_beneath() :
 * Opens `rel` under the directory `dir_fd` (AT_FDCWD allowed) without ever following a symbolic
 * link: `rel` must be plain components (no leading '/', no empty, "." or ".." component, no
 * trailing '/'); each is opened under the one before with O_NOFOLLOW|O_CLOEXEC (O_DIRECTORY for
 * the intermediate ones), the last with `flags` | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, then
 * O_NONBLOCK is cleared (a FIFO never blocks the call). `flags` is O_RDONLY (the result must be
 * a regular file or a directory: what quant_quantize_path() takes as `in`) or
 * O_RDONLY|O_DIRECTORY (a directory); anything else is refused. The type is checked with fstat on
 * the opened descriptor. Thread-safe; for a server validating a request.
 * @return : the descriptor (the caller closes it), or -1 with `err` filled naming the component
 *           reached: QUANT_CK_ERR_ACCESS ("a/b: a symbolic link (quantd does not follow links)",
 *           "../x: not a plain relative path ..."), QUANT_CK_ERR_IO ("a/b: No such file or
 *           directory", "a/b: not a regular file or a directory"), QUANT_CK_ERR_ARG (NULL `rel`,
 * bad flags), QUANT_CK_ERR_NOMEM. Hard links are not detected (they are the file itself). */
QUANT_API int quant_open_beneath(int dir_fd, const char *rel, int flags, quant_ck_error *err);

/*! quant_dequantize_path() :
 * The inverse for the native layout: every NAME.qvalue (+ .scale, + .zero_point) in `in` becomes
 * a float tensor NAME of `dtype` (QUANT_ST_F32, QUANT_ST_BF16 or QUANT_ST_F16); other tensors
 * are copied. File -> file or directory -> directory, like quant_quantize_path(). A GGUF file
 * (recognised by its magic, whatever its name) becomes one safetensors file of `dtype` tensors
 * (quant_gguf_dequantize_path() of quant_gguf.h).
 * @return : QUANT_CK_OK or an error; nothing is left at `out` on failure. */
QUANT_API quant_ck_status quant_dequantize_path(const char *in, const char *out,
                                                quant_st_dtype dtype, int threads,
                                                quant_ck_error *err);

#ifdef __cplusplus
}
#endif
#endif /* QUANT_PIPELINE_H */
