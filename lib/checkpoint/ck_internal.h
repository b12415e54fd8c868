/* ck_internal.h -- libquant-checkpoint's internal header: large buffers and the bounded queue the
 * pipeline stages share, the per-shard plan (what each input tensor becomes), units of work, and
 * the hooks between plan, layouts, compute, report and the directory driver.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_CK_INTERNAL_H
#define QUANT_CK_INTERNAL_H

#include <dirent.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <sys/stat.h>

#include "quant_pipeline.h"

/* ---- messages (ck_error.c) ------------------------------------------------------------------- */

#define CK_SHORT_KEEP 60  /* bytes of a long name a message keeps */
#define CK_SHORT_MAX  128 /* room ck_short_text needs */

/* `s` as is when short, else its first CK_SHORT_KEEP bytes (whole UTF-8 characters) then
 * "...[N bytes]" in `buf` (capacity at least CK_SHORT_MAX): a 10k-character tensor name must not
 * push the rest of a message out of its 1 KiB. */
const char *ck_short_text(const char *s, char *buf, size_t cap);
/* vsnprintf into buf (capacity cap, always NUL-terminated) with every string argument passed
 * through ck_short_text: quant_ck_fail and quant_ck_prefix format with it, so a long name never
 * pushes the reason out of a message. */
void ck_vformat(char *buf, size_t cap, const char *fmt, va_list ap);

/* ---- big buffers and the bounded queue (buffers.c) ------------------------------------------ */

/* Anonymous mappings recycled through a bounded cache: resident memory follows the number of
 * buffers in flight plus a fixed reserve. Contents are NOT zeroed (a recycled buffer holds old
 * data). ck_buf_alloc returns NULL on failure (n == 0 gives a valid pointer that ck_buf_free
 * accepts); ck_buf_free takes the size given to ck_buf_alloc. ck_buf_trim returns the cache to
 * the OS (at the end of a run). */
void *ck_buf_alloc(size_t n);
void ck_buf_free(void *p, size_t n);
void ck_buf_trim(void);
/* Maps bytes [off, off + len) of fd read-only (page-aligned underneath); *base and *base_len are
 * what ck_unmap takes. NULL on failure (errno set). */
void *ck_map_range(int fd, uint64_t off, size_t len, void **base, size_t *base_len);
void ck_unmap(void *base, size_t base_len);

/* A FIFO of pointers with a fixed capacity. push blocks while full, pop while empty; after
 * ck_queue_close both return at once (push returns false, pop returns NULL once drained). */
typedef struct ck_queue {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    void **items;
    size_t cap, head, len;
    bool closed;
} ck_queue;

bool ck_queue_init(ck_queue *q, size_t cap);
void ck_queue_destroy(ck_queue *q);
bool ck_queue_push(ck_queue *q, void *item);
void *ck_queue_pop(ck_queue *q);
void ck_queue_close(ck_queue *q);

/* ---- SHA-256 of outputs while they are written (hash.c) ---------------------------------------
 */

/* The digest of `ctx` as 64 lowercase hex digits and a NUL. */
void ck_sha256_hex(struct sha256_ctx *ctx, char hex[65]);

/* A file's SHA-256 taken in file order while its ranges are written in any order: a thread
 * hashes each range once everything before it is written, reading it back from `fd` (open for
 * reading) with pread. NULL when out of memory or no thread can be started. */
typedef struct ck_hasher ck_hasher;
ck_hasher *ck_hasher_start(int fd, uint64_t size);
/* Bytes [off, off + n) are written (each byte once; thread-safe). */
void ck_hasher_wrote(ck_hasher *h, uint64_t off, uint64_t n);
/* The file is complete: the thread goes on to its end (whether every range was reported written
 * or not), while the caller does something else (an fsync). */
void ck_hasher_complete(ck_hasher *h);
/* ck_hasher_complete, then waits for the thread and frees `h`: true with `hex`; false with
 * *error (errno) when reading back failed. */
bool ck_hasher_finish(ck_hasher *h, char hex[65], int *error);
/* Abandons the hash (a failed write); NULL is a no-op. */
void ck_hasher_free(ck_hasher *h);

/* ---- the plan of one shard (plan.c, layout_native.c, layout_ct.c) ---------------------------- */

/* How the bytes of libquant's codes become the stored tensor. */
typedef enum ck_codec {
    CK_CODEC_RAW = 0,   /* the codes as libquant writes them (packed nibbles when how.pack) */
    CK_CODEC_PACK32 = 1 /* compressed-tensors: code + 2^(b-1), b bits each, LSB-first in I32 */
} ck_codec;

/* Output roles of a quantized tensor; -1 in `out` when the layout has no such tensor
 * (CK_OUT_GSCALE: compressed-tensors nvfp4's weight_global_scale). */
enum { CK_OUT_DATA = 0, CK_OUT_SCALE, CK_OUT_ZP, CK_OUT_SHAPE, CK_OUT_GSCALE, CK_OUT_ROLES };

typedef struct ck_tensor_plan {
    const quant_st_tensor *in;
    bool quantize;
    const char *reason; /* copied: why (static string) */
    long rule;          /* the rule that decides it; -1 when none does (or rank/dtype decide) */
    long first_match;   /* the first rule matching its module path, whatever then decides: what
                           counts for unused rules (SPEC section 10) */
    const quant_rule *r;
    quant_how how;
    quant_dtype in_dtype;
    int64_t scale_shape[QUANT_MAX_RANK];
    int64_t scale_numel;
    bool asym;
    ck_codec codec;
    bool zp_packed;  /* compressed-tensors: zero points in int32 words packed along dim 0 */
    bool scale_e8m0; /* compressed-tensors mxfp4 / mxfp8: the scale as U8 127 + log2(s) */
    bool scale_e4m3; /* compressed-tensors nvfp4: the block scale s_b as F8_E4M3 */
    float amax;      /* nvfp4: max |x| of the tensor (global_scale.c's pass) */
    /* compressed-tensors nvfp4: the next member of the tensor's fused group (q/k/v, gate/up, ...,
     * possibly in another shard), a ring back to itself; NULL outside a group. The group shares
     * one global scale, from the max |x| over its members. */
    struct ck_tensor_plan *fuse_next;
    long out[CK_OUT_ROLES]; /* indices into the shard's output list (copy: out[DATA] only) */
    /* work split along axis 0 */
    int64_t row_elems; /* elements per axis-0 index */
    int64_t unit_rows; /* axis-0 indices per unit */
    int64_t tile0;     /* axis-0 indices per scale row (shape[0] / scale_shape[0]) */
    bool two_pass;     /* axis 0 reduced and a scale group exceeds a unit: calibrate first */
    /* weight_importance (SPEC 9): the statistic weighing its MSE search (how.importance points
     * into it), or NULL */
    const quant_importance *imp;
    /* compressed-tensors: the static activation that became this weight's input_scale */
    const quant_static_act *static_act;
    /* compressed-tensors: vLLM has a scheme for it but no common kernel takes its group size
     * (ck_ct_kernel_warning says which) */
    bool ct_group_warn;
} ck_tensor_plan;

/* A static activation scale (SRQ) planned into a shard: its output tensors. */
typedef struct ck_act_plan {
    const quant_static_act *act;
    long out_scale, out_zp; /* indices into the shard's output list; out_zp -1 when symmetric */
} ck_act_plan;

typedef struct ck_shard_plan {
    quant_st_file *in;
    const char *base; /* input base name */
    size_t n;         /* == in->n_tensors */
    ck_tensor_plan *t;
    size_t n_out, cap_out;
    quant_st_out_tensor *out; /* names owned (out_names) */
    char **out_names;
    char *quant_meta;    /* native: the "quantization" metadata JSON; NULL otherwise */
    bool static_ok;      /* the run has static activation scales: act_static_scale rules pass */
    bool stats_later;    /* a plan whose statistics come later (ck_plan_shard's acts_later) */
    size_t n_tensor_out; /* out[0, n_tensor_out) come from tensors; the static acts' follow */
    size_t n_acts;
    ck_act_plan *acts; /* the static activation scales this shard holds */
} ck_shard_plan;

/* Planning errors gathered over the tensors of a shard or a run (plan_errors.c): the first whole,
 * the others grouped by their reason (the end of their message), a few names each. */
#define CK_PLAN_GROUPS 6 /* reasons told apart; tensors for further ones are only counted */
#define CK_PLAN_NAMES  8 /* names shown per reason */
typedef struct ck_plan_group {
    char reason[256];
    char names[640]; /* "'a', 'b'" */
    size_t count;
} ck_plan_group;

typedef struct ck_plan_errors {
    size_t n;                 /* tensors that cannot be planned */
    quant_ck_error first;     /* the first one's error, whole */
    const char *first_reason; /* into first.message */
    ck_plan_group same;       /* the others failing for the first one's reason */
    ck_plan_group groups[CK_PLAN_GROUPS];
    size_t n_groups;
    size_t left_out; /* tensors whose reason found no group */
} ck_plan_errors;

/* Whether `st` is about one tensor (planning goes on to report the others) rather than the run
 * (out of memory, cancelled, a bad file: planning stops). */
bool ck_plan_error_is_tensors(quant_ck_status st);
/* Records that tensor `tensor` cannot be planned, with its error. */
void ck_plan_errors_add(ck_plan_errors *pe, const char *tensor, const quant_ck_error *err);
/* QUANT_CK_OK when nothing was recorded; else the first error's status with every tensor in
 * `err` ("3 tensors cannot be planned: FIRST MESSAGE; the same for 'b', 'c'; tensor 'd': WHY"). */
quant_ck_status ck_plan_errors_finish(const ck_plan_errors *pe, quant_ck_error *err);

/* Plans every tensor of `in` by the rules (matched through the run's matcher `m`) for the
 * options' layout and chunk size, then the static activation scales `acts` (n_acts, borrowed)
 * placed in this shard. acts_later: a plan only, whose scales the statistics will give at run
 * time; compressed-tensors' "every act_static_scale weight has its input_scale" is then left to
 * the run. A tensor that cannot be planned (ck_plan_error_is_tensors) is recorded in `pe` (its
 * message prefixed with the shard's path) and the next one planned; the shard's plan is then
 * incomplete (no static activations, no metadata) and only good for ck_plan_free. Any other
 * error is returned at once. */
quant_ck_status ck_plan_shard(ck_shard_plan *sp, quant_st_file *in, const quant_ruleset *rules,
                              quant_rule_matcher *m, const quant_pipeline_options *o,
                              const quant_static_act *const *acts, size_t n_acts, bool acts_later,
                              ck_plan_errors *pe, quant_ck_error *err);
void ck_plan_free(ck_shard_plan *sp);
/* Appends an output tensor (name copied); returns its index or -1 (out of memory). */
long ck_plan_add_out(ck_shard_plan *sp, const char *name, quant_st_dtype dtype, int rank,
                     const int64_t *shape);

/* Layout hooks: add the output tensors of a quantized tensor (tp->how and scale shape set). */
quant_ck_status ck_native_outputs(ck_shard_plan *sp, ck_tensor_plan *tp, quant_ck_error *err);
quant_ck_status ck_ct_outputs(ck_shard_plan *sp, ck_tensor_plan *tp, quant_ck_error *err);
/* The warning of a tensor vLLM has a scheme for but whose group size its common kernels do not
 * take (malloc'd text, the caller frees it), or NULL: none, or out of memory. */
char *ck_ct_kernel_warning(const ck_tensor_plan *tp);
/* compressed-tensors' quantization strategy of a planned weight, from its scale shape. */
typedef enum { CK_CT_TENSOR, CK_CT_CHANNEL, CK_CT_GROUP, CK_CT_BLOCK } ck_ct_strategy;
ck_ct_strategy ck_ct_strategy_of(const ck_tensor_plan *tp);
const char *ck_ct_strategy_name(ck_ct_strategy s);
/* The output tensors of ck_ct_outputs without its checks (what compressed-tensors would write
 * for any int2..int8 / float8_e4m3fn rank-2 weight); for tests of the layout itself. */
quant_ck_status ck_ct_tensor_outputs(ck_shard_plan *sp, ck_tensor_plan *tp, quant_ck_error *err);
/* Layout hooks for a static activation scale: BASE_scale (+ BASE_zero_point) in the native
 * layout; P.input_scale (+ P.input_zero_point) of the quantized weight P.weight of the
 * activation's module path in compressed-tensors (refused when that weight is not in the shard,
 * not quantized by an act_static_scale rule, already has one, or the scale is not one value). */
quant_ck_status ck_native_act_outputs(ck_shard_plan *sp, ck_act_plan *ap, quant_ck_error *err);
quant_ck_status ck_ct_act_outputs(ck_shard_plan *sp, ck_act_plan *ap, quant_ck_error *err);
/* compressed-tensors: every weight quantized by an act_static_scale rule got its input_scale. */
quant_ck_status ck_ct_check_static(const ck_shard_plan *sp, quant_ck_error *err);
/* Native: the "quantization" metadata value for the planned shard (malloc'd), NULL on OOM. */
char *ck_native_metadata(const ck_shard_plan *sp);
/* Zero points as stored in `dtype` (I8, I16 or U8): n values into `out`. */
void ck_store_zero_points(quant_dtype dtype, const int32_t *zp, size_t n, void *out);

/* compressed-tensors packing: `rows` rows of `n` signed codes (I8, bits b) into rows of
 * ceil(n*b/32) little-endian int32 words, each code offset by 2^(b-1), LSB-first. */
void ck_pack32_rows(const int8_t *codes, int64_t rows, int64_t n, int bits, uint32_t *out);
int64_t ck_pack32_words(int64_t n, int bits);

/* The zero points of a finished tensor as its layout stores them (the zero_point dtype, or
 * compressed-tensors' int32 words packed along dim 0), in a ck_buf_alloc buffer of *len bytes;
 * NULL on allocation failure. */
void *ck_encode_zero_point(const ck_tensor_plan *tp, const int32_t *zp, size_t *len);
/* mxfp4 and mxfp8 in compressed-tensors (SPEC 2b). */
bool ck_ct_is_mx(quant_qtype q);
/* n power-of-two scales as U8 E8M0 (127 + log2 s) in a ck_buf_alloc buffer of n bytes; NULL when
 * out of memory or a scale is not a power of two in 2^-127..2^127. */
void *ck_ct_encode_e8m0(const float *scale, size_t n);
void *ck_ct_pack_zero_point(const ck_tensor_plan *tp, const int32_t *zp, size_t *len);
/* nvfp4 in compressed-tensors: the n effective scales e_b of a tensor with global scale g back
 * to its block scales s_b as F8_E4M3 (e4m3fn(e_b * g), checked to give f32(s_b / g) == e_b
 * again, so a reader gets libquant's e_b exactly), in a ck_buf_alloc buffer of n bytes; NULL when
 * out of memory or a scale does not come back. e_b * g is within a few float32 ulps of s_b (12
 * bits even when e_b is a subnormal, s_b >= 2^-9 and g <= FLT_MAX), far closer than e4m3fn's
 * spacing, so the check is a guard. */
void *ck_ct_encode_nvfp4_scale(const float *scale, size_t n, float g);
/* The fused groups of compressed-tensors nvfp4 weights over all planned shards (ct_fused.c): the
 * weights vLLM loads as one layer (q/k/v_proj, gate/up_proj, ... of one parent module) are
 * linked through fuse_next; a group where some member is nvfp4 and another is not nvfp4 is
 * refused, naming both, and so is an nvfp4 group missing a member when the run is not `whole`
 * (one file, maybe one shard of several: the missing member may lie in another). */
quant_ck_status ck_ct_fuse_groups(ck_shard_plan *plans, size_t n_plans, bool whole,
                                  quant_ck_error *err);

/* compressed-tensors' quantization_config, gathered over every shard of a run. */
typedef struct ck_ct_config ck_ct_config;
ck_ct_config *ck_ct_config_new(void);
void ck_ct_config_free(ck_ct_config *cfg);
/* Records where a planned tensor goes: a config group (quantized) or `ignore` (a rank-2
 * `.weight` left in float). */
quant_ck_status ck_ct_config_add(ck_ct_config *cfg, const ck_tensor_plan *tp, quant_ck_error *err);
/* Sets "quantization_config" in the JSON text of config.json (`text`, may be NULL for a new
 * file) and returns the new text (malloc'd), or NULL with `err` filled. */
char *ck_ct_config_apply(const ck_ct_config *cfg, const char *text, quant_ck_error *err);

/* ---- unused rules and the public plan (plan_doc.c) ---------------------------------------------
 */

/* The rules that are the first match of no tensor of the planned shards: `*out` (malloc'd,
 * ascending, NULL when *n is 0). */
quant_ck_status ck_unused_rules(const ck_shard_plan *plans, size_t n_plans, size_t n_rules,
                                long **out, size_t *n, quant_ck_error *err);
/* For unused rule `rule`: the regex it probably meant (its module_path with ".*" before it, when
 * that matches the module path of a tensor of the planned shards), malloc'd; NULL otherwise. */
char *ck_rule_hint(const quant_ruleset *rules, size_t rule, const ck_shard_plan *plans,
                   size_t n_plans);
/* QUANT_CK_ERR_RULES "nothing to quantize: ..." when the planned shards hold tensors and the
 * rules quantize none of them (naming the first unused rules, with their hints, and an example
 * module path); QUANT_CK_OK otherwise. The caller decides whether that is allowed. */
quant_ck_status ck_check_quantizes(const ck_shard_plan *plans, size_t n_plans,
                                   const quant_ruleset *rules, const long *unused,
                                   char *const *hints, size_t n_unused, quant_ck_error *err);
/* The public plan of the planned shards (their outputs, totals) with the unused rules (copied). */
/* A plan from ready entries (layouts without shard plans: gguf); everything is copied. */
quant_ck_status ck_plan_doc_from_entries(quant_layout layout, const quant_plan_entry *entries,
                                         size_t n, const long *unused, size_t n_unused,
                                         quant_plan **out, quant_ck_error *err);
quant_ck_status ck_plan_doc_new(quant_layout layout, const ck_shard_plan *plans, size_t n_plans,
                                const long *unused, size_t n_unused, quant_plan **out,
                                quant_ck_error *err);
/* Bytes of an output tensor's data (its dtype's bits x elements / 8). */
uint64_t ck_out_nbytes(const quant_st_out_tensor *t);

/* ---- units of work (pipeline.c, compute.c) ----------------------------------------------------
 */

typedef enum ck_unit_kind { CK_UNIT_COPY = 0, CK_UNIT_CALIB, CK_UNIT_QUANT } ck_unit_kind;

typedef struct ck_piece {
    long index; /* output tensor */
    uint64_t offset;
    void *buf;
    size_t len, alloc; /* alloc: ck_buf_alloc size to free (0: not owned) */
} ck_piece;

#define CK_MAX_PIECES 5

typedef struct ck_unit {
    ck_tensor_plan *tp;
    size_t tensor; /* index in the shard */
    ck_unit_kind kind;
    int64_t row0, rows;
    uint64_t in_off, in_len;
    bool first, last; /* first/last unit of its tensor (last of its pass for CALIB) */
    void *in_buf;     /* the input bytes: a ck_buf_alloc buffer, or inside map_base */
    void *map_base;   /* non-NULL: in_buf lies in this read-only mapping of the file */
    size_t map_len;
    size_t n_pieces;
    ck_piece piece[CK_MAX_PIECES];
} ck_unit;

/* Per-tensor state the compute stage keeps between units. */
typedef struct ck_tensor_state {
    float *scale;
    int32_t *zp;
    float *absmax, *min, *max; /* two-pass calibration */
    double *sumsq;             /* two-pass rms: sum of rms_chunk^2 * n_chunk */
    double sum_x2, sum_e2, max_err;
    int64_t calib_units;
    bool mse;                     /* an MSE calibration: the search's errors, by unit */
    double mse_before, mse_after; /* summed in unit order */
    int64_t mse_groups, mse_shrunk;
} ck_tensor_state;

typedef struct ck_compute {
    quant_ctx *ctx;
    bool quality;
    ck_tensor_state st;
} ck_compute;

/* Runs one unit; fills its pieces (buffers from ck_buf_alloc). */
quant_ck_status ck_compute_unit(ck_compute *c, ck_unit *u, quant_ck_error *err);
/* Fills the report entry's quality of the tensor just finished and clears the state. */
void ck_compute_finish(ck_compute *c, quant_report_entry *e);
void ck_compute_destroy(ck_compute *c);

/* ---- the report (report.c) --------------------------------------------------------------------
 */

/* static_acts: the run allows static activation scales (the JSON then lists them). */
quant_report *ck_report_new(quant_layout layout, bool static_acts);
/* Appends an entry for `tp` (strings copied); returns it or NULL on OOM. */
quant_report_entry *ck_report_add(quant_report *r, const char *shard, const ck_tensor_plan *tp);
/* Appends a copy of `src` (its strings copied; `reason` must be static): for layouts whose
 * tensors have no ck_tensor_plan (gguf). NULL on OOM or for a NULL report. */
quant_report_entry *ck_report_add_entry(quant_report *r, const quant_report_entry *src);
/* Records the static activation scales a shard wrote (strings copied); false on OOM. */
bool ck_report_add_static(quant_report *r, const char *shard, const ck_shard_plan *sp);
/* Records the activations skipped (quant_pipeline_options.skipped_acts, copied); false on OOM. */
bool ck_report_set_skipped(quant_report *r, const quant_skipped_act *s, size_t n);
/* Records the run's unused rules (copied) and their hints (`hints`: n strings or NULLs, or NULL
 * for none; taken over, freed also on failure); false on OOM. */
bool ck_report_set_unused(quant_report *r, const long *unused, char **hints, size_t n);
/* Records an output file the run wrote (strings copied; sha256 may be NULL); false on OOM. A
 * NULL report records nothing. */
bool ck_report_add_output(quant_report *r, const char *name, uint64_t bytes, const char *sha256);
/* Forgets the outputs (a run that failed published none). */
void ck_report_drop_outputs(quant_report *r);

/* ---- one shard through the pipeline (pipeline.c) --------------------------------------------- */

typedef struct ck_run {
    const quant_pipeline_options *opts;
    quant_ctx *ctx;
    quant_report *report;
    uint64_t tensors_done, tensors_total, bytes_done, bytes_total;
    /* filled by ck_run_shard: the output's tensor names and data size (for the index) */
} ck_run;

quant_ck_status ck_run_shard(ck_run *run, ck_shard_plan *sp, const char *out_path,
                             quant_ck_error *err);
/* nvfp4 (global_scale.c): reads every nvfp4 tensor of the run's shards once for max |x|, sets
 * each plan's how.global_scale (a fused group's members, fuse_next, all get the one from the max
 * over the group) and remakes the native metadata (which records g). Run before any shard's
 * header is written. */
quant_ck_status ck_global_scales(ck_run *run, ck_shard_plan *plans, size_t n_plans,
                                 quant_ck_error *err);

/* ---- inputs still arriving (input_wait.c, st_read.c) ------------------------------------------
 */

/* The run's wait function (quant_pipeline_options.input_wait) and its cancel flag. */
typedef struct ck_wait {
    quant_input_wait_fn fn;
    void *user;
    atomic_int *cancel;
} ck_wait;

#define CK_WHY_MAX 256 /* room for the reason a wait function gives */

/* Waits (w->fn) for bytes [0, end) of input `name` (its name under the input directory), or
 * the whole file (QUANT_INPUT_WHOLE); `tensor` (may be NULL) is the tensor being read. OK at once
 * when w or w->fn is NULL. A false from the wait: QUANT_CK_ERR_IO "tensor 'T': input stopped
 * before byte N arrived: REASON" (without the file: the caller prefixes it); then the cancel
 * flag: QUANT_CK_ERR_CANCELLED "cancelled" (as the pipeline says it: callers leave it as is). */
quant_ck_status ck_wait_input(const ck_wait *w, const char *name, uint64_t end, const char *tensor,
                              quant_ck_error *err);

/* quant_st_open_fd() for a file still arriving: the length prefix and the header are read only
 * once `w` confirms them (8 bytes, then 8 + length), the file's size is not taken (file_size is
 * what the header implies: data start + the tensors' bytes), and quant_st_read() waits for the
 * end of every range before reading it. `w` is copied; the wait name is the base name of
 * `name`. */
quant_ck_status ck_st_open_growing(int fd, const char *name, const ck_wait *w, quant_st_file **out,
                                   quant_ck_error *err);
/* A file opened by ck_st_open_growing, after its last tensor: waits for the whole file, then
 * checks its size against the header as quant_st_open() does (QUANT_CK_ERR_FORMAT "PATH: N
 * trailing bytes ..." / "PATH: file is truncated ..."). OK at once for any other file. */
quant_ck_status ck_st_check_whole(const quant_st_file *f, quant_ck_error *err);

/* ---- opening inputs under a directory descriptor (beneath.c) ---------------------------------
 */

/* A directory the run's inputs are opened under. */
typedef struct ck_dir {
    int fd;              /* a directory descriptor, or AT_FDCWD */
    const char *shown;   /* its name in messages ("shown/name"); NULL: names are shown as given */
    bool nofollow;       /* no_symlinks: plain components only, opened with O_NOFOLLOW */
    const ck_wait *wait; /* inputs still arriving: the files under it are waited for; NULL: none */
} ck_dir;

/* What an open may return: a regular file, a directory, or either. */
typedef enum ck_kind { CK_KIND_REG = 1, CK_KIND_DIR = 2, CK_KIND_ANY = 3 } ck_kind;

#define CK_LINK_REFUSED "a symbolic link (quantd does not follow links)"

/* Opens `rel` under `d` read-only (O_CLOEXEC; O_NONBLOCK while opening, so a FIFO never blocks,
 * then cleared): with d->nofollow one plain component at a time with O_NOFOLLOW (the walker of
 * quant_open_beneath), else one openat() that follows links (`rel` may then be absolute). The
 * opened descriptor must be of `kind` (fstat on it); `*sb` (when not NULL) gets that fstat.
 * @return : QUANT_CK_OK with `*fd`; QUANT_CK_ERR_ACCESS (a link, a path that is not plain),
 *           QUANT_CK_ERR_IO (errno text, or the wrong kind) naming "shown/rel-so-far". */
quant_ck_status ck_open_in(const ck_dir *d, const char *rel, ck_kind kind, int *fd, struct stat *sb,
                           quant_ck_error *err);
/* fstatat of `name` under `d`, not following a link when d->nofollow; false when it fails. */
bool ck_stat_in(const ck_dir *d, const char *name, struct stat *sb);
/* Fills `err` with "shown/name: what" and returns `status`. */
quant_ck_status ck_fail_in(quant_ck_error *err, quant_ck_status status, const ck_dir *d,
                           const char *name, const char *what);
/* "shown/name" (or `name`), malloc'd; NULL on OOM. */
char *ck_shown_name(const ck_dir *d, const char *name);

/* ---- files ------------------------------------------------------------------------------------
 */

/* Reads a whole small regular file (config, index) under `d`, up to `max` bytes; malloc'd and
 * NUL-terminated. With d->wait, the whole file is waited for first (as by ck_copy_in*). */
quant_ck_status ck_read_small_in(const ck_dir *d, const char *name, size_t max, char **out,
                                 size_t *len, quant_ck_error *err);
/* Copies the regular file `name` under `d` (contents and mode) to the new file `to`. */
quant_ck_status ck_copy_in(const ck_dir *d, const char *name, const char *to, quant_ck_error *err);
/* The same; `sha256` (when not NULL) gets the SHA-256 of the bytes copied (hex, 65 bytes) and
 * `bytes` (when not NULL) their number. */
quant_ck_status ck_copy_in_sha(const ck_dir *d, const char *name, const char *to, char *sha256,
                               uint64_t *bytes, quant_ck_error *err);
/* A directory stream over a duplicate of `fd` (close-on-exec), rewound; NULL with errno set. */
DIR *ck_opendir_fd(int fd);
/* Writes `len` bytes to `path` through a temporary file, fsync and rename. */
quant_ck_status ck_write_file_atomic(const char *path, const void *data, size_t len,
                                     quant_ck_error *err);
/* The same; `sha256` (when not NULL) gets the SHA-256 of `data` (hex, 65 bytes). */
quant_ck_status ck_write_file_atomic_sha(const char *path, const void *data, size_t len,
                                         char *sha256, quant_ck_error *err);
/* fsyncs the directory holding `path` (best effort), after a rename into it. */
void ck_fsync_parent(const char *path);
/* Removes a directory tree we created (best effort). */
void ck_remove_tree(const char *path);
/* The part of `path` after the last '/'. */
const char *ck_basename(const char *path);

/* ---- temporaries and publishing outputs (temps.c) ----------------------------------------------
 */

#define CK_OUTPUT_LINK_REFUSED                                                                     \
    ("a symbolic link (outputs are never written through or over a link: name its target, or "     \
     "remove the link)")

/* What an output path may be before it is written. */
typedef enum ck_target {
    CK_TARGET_NEW = 0,      /* nothing */
    CK_TARGET_FILE = 1,     /* nothing, or a regular file (replaced) */
    CK_TARGET_EMPTY_DIR = 2 /* nothing, or an empty directory (replaced) */
} ck_target;

/* A temporary file beside `path`, "<path>.quant-tmp-<pid>-XXXXXX" (mode 0600, created O_EXCL:
 * never through a link), locked (flock LOCK_EX) for as long as *fd stays open: the proof
 * quant_remove_stale_temps() looks for. *tmp malloc'd. */
quant_ck_status ck_temp_file(const char *path, char **tmp, int *fd, quant_ck_error *err);
/* A temporary directory beside `out`, "<out>.quant-partial-<pid>-XXXXXX" (mode 0755), locked
 * through *lock_fd (-1 if it could not be opened) until that is closed. *tmp malloc'd. */
quant_ck_status ck_temp_dir(const char *out, char **tmp, int *lock_fd, quant_ck_error *err);
/* lstat of `path` against `kind`: a link is QUANT_CK_ERR_ACCESS (CK_OUTPUT_LINK_REFUSED), a FIFO,
 * device or socket QUANT_CK_ERR_ACCESS ("not a regular file (a FIFO); ..."), an existing file or
 * directory `kind` does not allow QUANT_CK_ERR_ARG ("output already exists"). */
quant_ck_status ck_check_target(const char *path, ck_target kind, quant_ck_error *err);
/* Checks `path` with ck_check_target, then renames `tmp` to it: over a regular file (FILE), after
 * removing the empty directory (EMPTY_DIR), else never replacing anything (RENAME_NOREPLACE where
 * the filesystem has it). */
quant_ck_status ck_publish(const char *tmp, const char *path, ck_target kind, quant_ck_error *err);

/* ---- checkpoint directories (checkpoint_dir.c) ------------------------------------------------
 */

#define CK_INDEX_NAME "model.safetensors.index.json"
#define CK_CONFIG_MAX (64u << 20) /* the largest config.json read */

/* The shards of an input: one file, or a directory's shards in index (or name) order. */
typedef struct ck_shards {
    size_t n;
    quant_st_file **f;
    bool is_dir, had_index;
    ck_dir dir; /* is_dir: the input directory (descriptor owned, name `in`); fd -1 otherwise */
} ck_shards;

/* Opens `in` under `base` and validates every shard of it (a file or a checkpoint directory)
 * before any work: the index must name existing shards in `in` (no path separators) and agree
 * with their headers. Every file is opened under the directory's descriptor (ck_open_in), with
 * base->nofollow carried to the directory. */
quant_ck_status ck_shards_open(const ck_dir *base, const char *in, ck_shards *s,
                               quant_ck_error *err);
void ck_shards_close(ck_shards *s);

/* An output name that must not exist yet (or, for directories, be an empty directory), checked
 * with lstat: a link, FIFO, device or socket there is refused (ck_check_target). */
quant_ck_status ck_check_output(const char *out, bool dir, quant_ck_error *err);

/* A directory output built under a temporary name beside `out`. */
typedef struct ck_outdir {
    char *tmp;        /* the directory being filled */
    int lock_fd;      /* holds its lock (ck_temp_dir) until published or removed; -1 for none */
    void *weight_map; /* json_t object */
    uint64_t total_size;
    quant_report *report; /* where ck_outdir_finish records the files it writes (may be NULL) */
    bool sha256;          /* ... with their SHA-256 */
} ck_outdir;

quant_ck_status ck_outdir_begin(const char *out, ck_outdir *d, quant_ck_error *err);
/* Path of `name` inside the temporary directory (malloc'd), NULL on OOM. */
char *ck_outdir_path(const ck_outdir *d, const char *name);
/* Records the tensors of one written shard for the index. */
quant_ck_status ck_outdir_add_shard(ck_outdir *d, const char *shard, const quant_st_out_tensor *t,
                                    size_t n, quant_ck_error *err);
/* Checks, before any work, the other files of the input directory that ck_outdir_finish will copy
 * (config.json excluded when `config_replaced`): a symbolic link among them is refused when the
 * input does not follow links. The copy checks again as it opens each file. */
quant_ck_status ck_outdir_check_others(const ck_shards *s, bool config_replaced,
                                       quant_ck_error *err);
/* Copies the other regular files of the input directory (config.json replaced by `config_text`
 * when not NULL; non-regular entries skipped, a link refused when the input does not follow
 * links), writes the index when the input had one or has several shards, and renames the
 * directory to `out`. */
quant_ck_status ck_outdir_finish(ck_outdir *d, const ck_shards *s, const char *config_text,
                                 const char *out, quant_ck_error *err);
/* Removes the temporary directory (after a failure) and frees `d`. */
void ck_outdir_free(ck_outdir *d);

/* ---- compressed-tensors config.json of a one-file run (ct_file_config.c) ----------------------
 */

/* The config.json text for a one-file run: the run's quantization_config (`ct`) merged into the
 * config.json beside the input file `in` (read under `base`; a new object when there is none, or
 * when the input is still arriving). With `out` (a run, not a plan), config.json beside `out` must
 * not exist yet: QUANT_CK_ERR_ARG naming it and what to do, or ck_check_target's refusal.
 * @return : QUANT_CK_OK with *text malloc'd; an error naming the file otherwise. */
quant_ck_status ck_ct_file_config_text(const ck_dir *base, const char *in, const char *out,
                                       const ck_ct_config *ct, char **text, quant_ck_error *err);
/* Writes `text` as config.json beside the output file `out` (atomically, never over an existing
 * file) and records it in `report` (with its SHA-256 when `sha256`). */
quant_ck_status ck_ct_file_config_write(const char *out, const char *text, quant_report *report,
                                        bool sha256, quant_ck_error *err);

#endif /* QUANT_CK_INTERNAL_H */
