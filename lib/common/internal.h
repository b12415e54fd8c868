/* internal.h -- libquant's one internal header: error helpers, the quantization plan, the
 * per-ISA kernel table and the thread pool.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_INTERNAL_H
#define QUANT_INTERNAL_H

#include "quant.h"

/* ---- errors (error.c) --------------------------------------------------------------------- */

/* Fills `err` (when not NULL) and returns `status`. */
quant_status quant_fail(quant_error *err, quant_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void quant_error_clear(quant_error *err);

#define QUANT_RETURN_IF_ERR(expr)                                                                  \
    do {                                                                                           \
        quant_status st_ = (expr);                                                                 \
        if (st_ != QUANT_OK) return st_;                                                           \
    } while (0)

/* ---- code kinds the kernels produce ------------------------------------------------------- */

typedef enum quant_kcode {
    QK_I8 = 0,   /* signed byte codes: int2..int8 */
    QK_U8 = 1,   /* unsigned byte codes: uint4, uint8 */
    QK_I16 = 2,  /* int16 */
    QK_E4M3 = 3, /* fp8 e4m3fn codes */
    QK_E5M2 = 4, /* fp8 e5m2 codes */
    QK_NF4 = 5,  /* nf4 indices 0..15 */
    QK_E2M1 = 6, /* e2m1 (fp4) codes sign << 3 | magnitude */
    QK_COUNT
} quant_kcode;

/* ---- the plan: a tensor shape seen as rows (plan.c) --------------------------------------- */

/* All axes but the last are flattened into rows. Row r's scales start at
 * scale[srow(r) * ncolgroups]; element c of a row belongs to column group c / col_tile.
 * Rows that share a scale row ("members") are reduced together. */
typedef struct quant_plan {
    int rank; /* >= 1 (a rank-0 tensor is planned as shape [1]) */
    int64_t shape[QUANT_MAX_RANK];
    int64_t sshape[QUANT_MAX_RANK]; /* scale shape */
    int64_t tile[QUANT_MAX_RANK];   /* shape / sshape */
    int64_t numel, scale_numel;
    int64_t nrows, ncols;
    int64_t col_tile, ncolgroups;
    int64_t nsrows;     /* scale rows */
    int64_t members;    /* rows per scale row */
    int64_t group_size; /* elements per scale element */
    quant_calib_method method;
    const quant_qtype_traits *traits;
    quant_kcode kcode;
    size_t code_size;   /* bytes per unpacked code: 1 or 2 */
    float global_scale; /* nvfp4: the tensor's g (0 when not known yet) */
    bool packed;        /* two codes per byte along the last axis */
    int64_t qrow_bytes; /* bytes of one row of codes */
    quant_dtype scale_dtype;
    /* MSE calibrations (mse.c): importance per index of axis imp_axis (NULL: all 1); for a
     * row-axis imp_axis, row r's index is (r / imp_inner) % shape[imp_axis]; imp_inner is 0
     * when imp_axis is the last axis (the weight follows the column) */
    const float *importance;
    int imp_axis;
    int64_t imp_inner;
    struct quant_mse_result *mse_out;
} quant_plan;

/* Validates the shape-independent part of `how`; sets plan->traits and plan->method. */
quant_status quant_plan_check_how(const quant_how *how, quant_plan *plan, quant_error *err);
/* Validates `how` for `shape` and fills `plan`. */
quant_status quant_plan_make(const quant_how *how, int rank, const int64_t *shape, quant_plan *plan,
                             quant_error *err);
/* A zero point must be given exactly when the calibration is asymmetric. */
quant_status quant_check_zero_point(const quant_plan *plan, const int32_t *zero_point,
                                    quant_error *err);
/* Every given zero point lies in the qtype's [qmin, qmax] (the quantizer only makes such; one
 * read from a file may not): for the functions that take zero points as input. */
quant_status quant_check_zero_point_values(const quant_plan *plan, const int32_t *zero_point,
                                           quant_error *err);
/* Scale row of row `row`. */
int64_t quant_plan_srow(const quant_plan *plan, int64_t row);
/* Row index of member `m` (row-major within the tile) of scale row `srow`. */
int64_t quant_plan_member_row(const quant_plan *plan, int64_t srow, int64_t m);

/* ---- kernels (lib/arch/...) --------------------------------------------------------------- */

/* One row chunk to quantize or dequantize: element j of the chunk is column c0 + j and uses
 * scale[(c0 + j) / tile] (and zp[...] when zp is not NULL). */
typedef struct quant_krow {
    quant_kcode kcode;
    int64_t tile;
    const float *scale;
    const int32_t *zp;
    float qmin, qmax;
    const char *pf; /* memory worth prefetching while quantizing (the next row's source),
                       element j of the chunk matching pf + j * pf_elem, or NULL; a hint that
                       never changes results */
    int64_t pf_elem;
    bool checked; /* x is known to be finite: kernels may skip the non-finite check */
} quant_krow;

/* Reductions return nonzero when a non-finite value was seen. acc arrays are indexed by the
 * column group (c0 + j) / tile. absmax keeps max |x|; minmax keeps min(x) and max(x) folded into
 * the existing values. */
typedef int (*quant_absmax_fn)(const float *x, int64_t n, int64_t c0, int64_t tile, float *acc);
typedef int (*quant_minmax_fn)(const float *x, int64_t n, int64_t c0, int64_t tile, float *mn,
                               float *mx);
/* Writes codes (1 or 2 bytes each) for x[0..n); returns nonzero when x held a non-finite value. */
typedef int (*quant_quantize_fn)(const quant_krow *r, const float *x, int64_t n, int64_t c0,
                                 void *codes);
/* out[j] = (level(code[j]) - zp) * scale. */
typedef void (*quant_dequantize_fn)(const quant_krow *r, const void *codes, int64_t n, int64_t c0,
                                    float *out);
typedef void (*quant_widen_fn)(const uint16_t *src, float *dst, int64_t n);
/* Packs n codes (low nibbles) into ceil(n/2) bytes, as quant_pack_nibbles() does for one row. */
typedef void (*quant_pack_fn)(const uint8_t *codes, int64_t n, uint8_t *packed);
/* Error of d against x over n values, added into acc: [0] sum x^2, [1] sum (x-d)^2, [2] max
 * |x-d| (all in double). Defined by quant_generic_errstats: QUANT_ERR_LANES independent lanes,
 * element j in lane j % LANES for the full groups, the tail from lane 0, lanes added in order. */
typedef void (*quant_errstats_fn)(const float *x, const float *d, int64_t n, double acc[3]);
#define QUANT_ERR_LANES 8
/* Microscaling scales (SPEC 2b) of n groups from their absmax: scale[i] =
 * qn_mx_scale(absmax[i], bound, c), or qn_nvfp4_block_scale(absmax[i], g) (g > 0 and finite),
 * bit for bit. A SIMD version returns nonzero, leaving scale[] unspecified, when some absmax is
 * negative, NaN or infinite: the caller then runs the generic (scalar) one, which returns 0. */
typedef int (*quant_mx_scales_fn)(const float *absmax, int64_t n, float bound, float c,
                                  float *scale);
typedef int (*quant_nvfp4_scales_fn)(const float *absmax, int64_t n, float g, float *scale);
/* Linear symmetric float32 scales (SPEC 4): s = absmax[i] / bound, 1 when s < 2^-63; returns
 * nonzero when some s is not finite (scale[] then unspecified: the caller takes the checked
 * path). */
typedef int (*quant_lin_scales_fn)(const float *absmax, int64_t n, float bound, float *scale);
/* absmax and quantize reading contiguous bf16 values (x[j] stands for qn_bf16_to_f32(x[j]), an
 * exact widening) without a widened copy in memory: the results, return value included, are
 * those of absmax / quantize on the widened values, bit for bit. Optional: a table without them
 * (NULL) has the driver widen into scratch first. Drivers call them for symmetric integer codes
 * with tiles of QUANT_BF16_DIRECT_MIN_TILE and more, the shapes read in registers; other shapes
 * are correct too but widen blocks on the stack twice (reduction and quantize), which costs more
 * than the driver's one widening into scratch. */
#define QUANT_BF16_DIRECT_MIN_TILE 64
typedef int (*quant_absmax_bf16_fn)(const uint16_t *x, int64_t n, int64_t c0, int64_t tile,
                                    float *acc);
typedef int (*quant_quantize_bf16_fn)(const quant_krow *r, const uint16_t *x, int64_t n, int64_t c0,
                                      void *codes);

/* Candidates whose error sums an mse_acc call runs side by side (mse.c's batch). */
#define QUANT_MSE_BATCH 8
/* The MSE search's error sums (SPEC 9) of nk (1..QUANT_MSE_BATCH) candidates: for candidate k
 * (dequantized values d + k * ds, sums err + k * es) and j in [0, n), in order within each column
 * group g = (c0 + j) / tile, err[g] += (double)w[j] * (e * e) with e = (double)x[j] - (double)d[j],
 * every operation in float64 and each sum's additions in element order (versions may run
 * several candidates or groups side by side, never reorder one sum). */
typedef void (*quant_mse_acc_fn)(const float *x, const float *d, int64_t ds, int nk, const float *w,
                                 int64_t n, int64_t c0, int64_t tile, double *err, int64_t es);
/* One pass for a symmetric absmax calibration without a factor, float32 linear scales and
 * integer codes without a zero point: x[0..n) from column c0 (c0 and n multiples of r->tile, a
 * tile in QUANT_ONEPASS_TILE_OK) gets, per column group g = (c0 + j) / tile, scale[g] = its max
 * |x| / bound with SPEC 4's tiny rule (quant_generic_lin_scales) and the codes quantize gives
 * with those scales (r->scale and r->zp are not read), bit for bit. Returns nonzero,
 * scales and codes then unspecified, when a value or a scale is not finite, or the tile, offset
 * or code kind is not one it serves: the caller redoes the row by the three-pass path (absmax,
 * lin_scales, quantize), which reports a non-finite value or scale. Optional (NULL: the
 * three-pass path). */
#define QUANT_ONEPASS_TILE_OK(t) ((t) == 16 || (t) == 32 || (t) == 64)
typedef int (*quant_quantize_absmax_fn)(const quant_krow *r, const float *x, int64_t n, int64_t c0,
                                        float bound, float *scale, void *codes);

/* The MSE search's inner loop fused (SPEC 9) for integer codes without a zero point: for
 * candidate k in [0, nk) (scales scale + k * es, sums err + k * es) and j in [0, n), in order
 * within each column group g = (c0 + j) / tile: code = x[j] / scale[g] as quantize gives it (the
 * IEEE division, rounded to nearest even, clipped to [qmin, qmax]), d = code * scale[g] in
 * float32 as dequantize gives it, and err[g] += (double)w[j] * (e * e), e = (double)x[j] -
 * (double)d; x finite; w NULL: every weight 1. Versions run candidates side by side in vector
 * lanes, never reordering one sum, so the sums equal quantize + dequantize + mse_acc bit for bit.
 * Optional (NULL: that path). */
typedef void (*quant_mse_int_fn)(const float *x, const float *w, int64_t n, int64_t c0,
                                 int64_t tile, const float *scale, int nk, int64_t es, float qmin,
                                 float qmax, double *err);

/* The one-pass kernel generalised (quantize_onepass): the source read in place as float32 or
 * bfloat16 (`bf16`: x holds bf16 bit patterns, each standing for its exact widening), and the
 * scale rule of the qtype: SPEC 4's linear one (quantize_absmax's contract, integer codes), the
 * MX power of two qn_mx_scale(max |x|, bound, c) (e4m3fn or e2m1 codes), or nvfp4's
 * qn_nvfp4_block_scale(max |x|, g) (e2m1 codes; g > 0 and finite). */
typedef struct quant_onepass {
    bool bf16;
    quant_scale_kind kind;
    float bound; /* B of the qtype */
    float c;     /* QUANT_SCALE_MX: the OAS constant */
    float g;     /* QUANT_SCALE_NVFP4: the tensor's global scale */
    bool packed; /* e2m1 codes, or minmax's integer codes, written two per byte
                  * (quant_pack_nibbles' order), n / 2 bytes */
    /* QUANT_SCALE_LINEAR with minmax (asymmetric) calibration: per group lo = min(min x, 0) and
     * hi = max(max x, 0) (canonical +0) times `factor` (1 without one), s = (hi - lo) /
     * (qmax - qmin) with the tiny rule (< QN_TINY_SCALE: 1), zp = qn_convert_int(qmin - lo / s)
     * into zp (indexed as scale), codes = clip(rint(x / s + zp)); integer codes only */
    bool minmax;
    float factor;
    int32_t *zp;
} quant_onepass;
/* x[0..n) from column c0 (c0 and n multiples of r->tile, a tile in QUANT_ONEPASS_TILE_OK; 16 or
 * 32 for the microscaling rules) gets, per column group, its scale by op's rule and the codes
 * quantize gives with those scales (one byte per code for 8-bit kinds, or packed: op->packed),
 * bit for bit, and with op->minmax each group's zero point into op->zp;
 * r->scale and r->zp are not read. Returns nonzero, scales and codes then unspecified,
 * when a value or a scale is not finite, or the shape, rule or code kind is not one it serves:
 * the caller then redoes the row by the three-pass path, which reports a non-finite value or
 * scale. Optional (NULL: quantize_absmax for float32 linear rows, else the three-pass path). */
typedef int (*quant_quantize_onepass_fn)(const quant_krow *r, const void *x, int64_t n, int64_t c0,
                                         const quant_onepass *op, float *scale, void *codes);
/* The codes of x[0..n) exactly as quantize (bf16: quantize_bf16) gives them, x being float32 or
 * bf16 (contiguous). `stream`: the codes are not read again soon (the call's data exceeds the
 * cache), so the kernel may store them around the cache (non-temporal stores), fenced (sfence)
 * before it returns; a hint that never changes results. quantize.c calls it, with `stream` set,
 * for the unpacked codes of large calls (symmetric integer codes, no zero point, tiles of
 * QUANT_STREAM_MIN_TILE and more, rows read in place); other shapes are correct too. Returns
 * nonzero when x held a non-finite value (as quantize). Optional (NULL: ordinary stores). */
#define QUANT_STREAM_MIN_TILE 64
typedef int (*quant_quantize_stream_fn)(const quant_krow *r, const void *x, bool bf16, int64_t n,
                                        int64_t c0, bool stream, void *codes);
/* The error sums errstats adds into acc for x[0..n) against the codes dequantized as dequantize
 * gives them with r (kcode, tile, scale, zp; r->scale and r->zp indexed by column group as
 * there), without the dequantized copy: the same f32 formula per element, the same lanes, order
 * and finish (quant_errstats_finish), so the same bits. x is float32, or contiguous bf16 (bf16
 * set) widened exactly as widen_bf16 does. `codes` are unpacked (one per byte, two for QK_I16).
 * Returns nonzero, acc untouched, for a shape it does not serve (the caller then dequantizes
 * and runs errstats). Optional (NULL: dequantize + errstats). */
typedef int (*quant_errstats_codes_fn)(const quant_krow *r, const void *x, bool bf16,
                                       const void *codes, int64_t n, int64_t c0, double acc[3]);

typedef struct quant_kernels {
    quant_isa isa;
    quant_absmax_fn absmax;
    quant_minmax_fn minmax;
    quant_quantize_fn quantize;
    quant_dequantize_fn dequantize;
    quant_widen_fn widen_bf16;
    quant_widen_fn widen_f16;
    quant_pack_fn pack;
    quant_errstats_fn errstats;
    quant_mx_scales_fn mx_scales;
    quant_nvfp4_scales_fn nvfp4_scales;
    quant_lin_scales_fn lin_scales;
    quant_absmax_bf16_fn absmax_bf16;     /* optional (NULL: widen first) */
    quant_quantize_bf16_fn quantize_bf16; /* optional (NULL: widen first) */
    quant_mse_acc_fn mse_acc;
    quant_quantize_absmax_fn quantize_absmax; /* optional (NULL: the three-pass path) */
    quant_mse_int_fn mse_int;                 /* optional (NULL: quantize + dequantize) */
    /* optional (NULL: see its type); appended last */
    quant_quantize_onepass_fn quantize_onepass;
    quant_quantize_stream_fn quantize_stream; /* optional (NULL: ordinary stores) */
    /* optional (NULL: dequantize + errstats); appended last */
    quant_errstats_codes_fn errstats_codes;
} quant_kernels;

extern const quant_kernels quant_kernels_generic;
#if defined(__x86_64__)
extern const quant_kernels quant_kernels_avx2;
extern const quant_kernels quant_kernels_avx512;
#endif
#if defined(__aarch64__)
extern const quant_kernels quant_kernels_neon;
#endif

/* Scalar kernels, callable from SIMD kernels for tails and rare shapes. */
int quant_generic_absmax(const float *x, int64_t n, int64_t c0, int64_t tile, float *acc);
int quant_generic_minmax(const float *x, int64_t n, int64_t c0, int64_t tile, float *mn, float *mx);
int quant_generic_quantize(const quant_krow *r, const float *x, int64_t n, int64_t c0, void *codes);
void quant_generic_dequantize(const quant_krow *r, const void *codes, int64_t n, int64_t c0,
                              float *out);
void quant_generic_errstats(const float *x, const float *d, int64_t n, double acc[3]);
int quant_generic_errstats_codes(const quant_krow *r, const void *x, bool bf16, const void *codes,
                                 int64_t n, int64_t c0, double acc[3]);
int quant_generic_mx_scales(const float *absmax, int64_t n, float bound, float c, float *scale);
int quant_generic_nvfp4_scales(const float *absmax, int64_t n, float g, float *scale);
int quant_generic_lin_scales(const float *absmax, int64_t n, float bound, float *scale);
void quant_generic_mse_int(const float *x, const float *w, int64_t n, int64_t c0, int64_t tile,
                           const float *scale, int nk, int64_t es, float qmin, float qmax,
                           double *err);
void quant_generic_mse_acc(const float *x, const float *d, int64_t ds, int nk, const float *w,
                           int64_t n, int64_t c0, int64_t tile, double *err, int64_t es);
/* mse_acc's per-element terms t[j] = (double)w[j] * (e * e), e = (double)x[j] - (double)d[j]
 * (any order: each term is one exact formula), and the shared driver that sums them in element
 * order per group and candidate, blocks of MSE_TERMS_BLOCK elements at a time: SIMD versions
 * pass their own terms function, so the sums are the same code on every ISA. */
#define MSE_TERMS_BLOCK 256
typedef void (*quant_mse_terms_fn)(const float *x, const float *d, const float *w, int64_t n,
                                   double *t);
void quant_generic_mse_terms(const float *x, const float *d, const float *w, int64_t n, double *t);
void quant_mse_acc_with(quant_mse_terms_fn terms, const float *x, const float *d, int64_t ds,
                        int nk, const float *w, int64_t n, int64_t c0, int64_t tile, double *err,
                        int64_t es);
/* The tail and the ordered reduction of quant_generic_errstats, for SIMD versions that ran the
 * full lane groups: adds x/d[0..n) (n < QUANT_ERR_LANES) into the lanes, then the lanes to acc. */
void quant_errstats_finish(const float *x, const float *d, int64_t n, double *sx, double *se,
                           double *mx, double acc[3]);
/* Stochastic rounding (integer codes only), any ISA: element j has flat index index0 + j. */
int quant_generic_quantize_sr(const quant_krow *r, const float *x, int64_t n, int64_t c0,
                              uint64_t key, uint64_t index0, void *codes);

/* The kernel table for an ISA (NULL when not built in or not supported by the CPU). */
const quant_kernels *quant_kernels_for(quant_isa isa);

/* ---- thread pool (pool.c) ----------------------------------------------------------------- */

typedef struct quant_pool quant_pool;
/* fn(arg, item, worker) runs once for every item in [0, nitems); worker is in [0, threads). */
typedef void (*quant_pool_fn)(void *arg, int64_t item, int worker);

quant_status quant_pool_new(int threads, quant_pool **out, quant_error *err);
void quant_pool_free(quant_pool *pool);
int quant_pool_threads(const quant_pool *pool);
void quant_pool_run(quant_pool *pool, int64_t nitems, quant_pool_fn fn, void *arg);

struct quant_ctx {
    const quant_kernels *k;
    quant_pool *pool;
    int64_t stream_min_bytes; /* quant_ctx_options.stream_min_bytes resolved (< 0: never) */
};

/* ---- row loading (load.c) ------------------------------------------------------------------ */

/* Maximum elements converted into a worker's scratch at once. */
#define QUANT_CHUNK 8192

/* Returns a pointer to `n` float32 values of row `row` of `x` starting at column c0: straight
 * into x when it is contiguous float32, else converted into `scratch` (>= n floats). */
const float *quant_load_row(const quant_kernels *k, const quant_tensor *x, const quant_plan *plan,
                            int64_t row, int64_t c0, int64_t n, float *scratch);
/* Element offset (through the strides) of the first element of row `row` of t. */
int64_t quant_row_offset(const quant_tensor *t, int64_t row);
/* Address of element c0 of row `row` of x (whatever its dtype), for prefetching. */
const char *quant_row_address(const quant_tensor *x, int64_t row, int64_t c0);
/* True when rows can be read without conversion (contiguous float32). */
bool quant_rows_direct(const quant_tensor *x);

/* Dequantizes n unpacked codes (one per code_size bytes: nibbles sign- or zero-extended to a
 * byte) of columns [c0, c0 + n) of row `row` into out (n floats). */
void quant_dequantize_codes(const quant_kernels *k, const quant_plan *p, const void *codes,
                            const float *scale, const int32_t *zp, int64_t row, int64_t c0,
                            int64_t n, float *out);
/* Dequantizes columns [c0, c0 + n) of row `row` of the codes q (laid out as quant_quantize
 * writes them) into out (n floats); codes is QUANT_CHUNK bytes of scratch for unpacking. */
void quant_dequantize_span(const quant_kernels *k, const quant_plan *p, const uint8_t *q,
                           const float *scale, const int32_t *zp, int64_t row, int64_t c0,
                           int64_t n, uint8_t *codes, float *out);

/* ---- work items and error sums (quantize.c, measure.c) ----------------------------------------
 */

/* Rows per pool work item for row-wise passes: about QUANT_ITEM_ELEMS values, at least one row.
 * The quantize and measure passes share it, so the per-item error sums of a fused quantize pass
 * are the ones quant_measure_error() adds. */
#define QUANT_ITEM_ELEMS (1 << 15)
int64_t quant_rows_per_item(const quant_plan *p);
/* Adds the per-item sums `partial` (items x 3: sum x^2, sum err^2, max |err|) in item order. */
void quant_errstats_sum(const double *partial, int64_t items, quant_error_stats *out);
/* The error sums of columns [c0, c0 + n) of row `row` into acc: x (n input values as float32,
 * or contiguous bf16 when bf16 is set) against `codes` (unpacked, as quant_dequantize_codes
 * takes them), by the kernel set's errstats_codes when it has one and serves the shape, else
 * widened into xs and dequantized into ds (QUANT_CHUNK floats each) for errstats: the same bits. */
void quant_errstats_codes(const quant_kernels *k, const quant_plan *p, const void *codes,
                          const float *scale, const int32_t *zp, int64_t row, int64_t c0, int64_t n,
                          const void *x, bool bf16, float *xs, float *ds, double acc[3]);
/* Columns [c0, c0 + n) of row `row` of x for quant_errstats_codes: contiguous bf16 read in place
 * (*bf16 set) when the kernel set has errstats_codes, else as float32 (quant_load_row into xs). */
const void *quant_errstats_source(const quant_kernels *k, const quant_tensor *x,
                                  const quant_plan *p, int64_t row, int64_t c0, int64_t n,
                                  float *xs, bool *bf16);

/* Validates an input tensor against its plan (dtype, data, strides). */
quant_status quant_check_input(const quant_tensor *x, quant_error *err);

/* ---- shared driver state (calibrate.c) ----------------------------------------------------- */

#include <stdatomic.h>

/* What the drivers share while reading one input: where to record the first non-finite index. */
typedef struct quant_reader {
    const quant_plan *plan;
    const quant_tensor *x;
    const quant_kernels *k;
    atomic_llong bad; /* smallest flat index of a non-finite value seen, INT64_MAX if none */
} quant_reader;

void quant_reader_init(quant_reader *rd, const quant_plan *plan, const quant_tensor *x,
                       const quant_kernels *k);
/* Records the first non-finite value of x[0..n) (row `row`, columns from c0). */
void quant_reader_bad(quant_reader *rd, int64_t row, int64_t c0, const float *x, int64_t n);
/* True when row `row` starts after a non-finite value already found (no need to read it). */
bool quant_reader_skip(quant_reader *rd, int64_t row);
/* Folds row `row` into the accumulators of its scale row (a = absmax or min, b = max, sums for
 * rms); returns nonzero when a non-finite value stopped it. */
int quant_reduce_row(quant_reader *rd, int64_t row, float *scratch, float *a, float *b,
                     double *sums);
/* Initial accumulator values for n column groups. */
void quant_reduce_init(const quant_plan *plan, int64_t n, float *a, float *b, double *sums);
/* Turns n accumulated column groups into calibration values at out (offset `at`). */
void quant_reduce_finish(const quant_plan *plan, int64_t n, const float *a, const float *b,
                         const double *sums, const quant_calibration *out, int64_t at);
/* Writes the fixed range into out (one value). */
void quant_calib_fixed(const quant_plan *plan, const quant_calibration *out);
/* The whole calibration of x into out (non-fused path). */
quant_status quant_calibrate_plan(quant_ctx *ctx, const quant_plan *plan, const quant_tensor *x,
                                  const quant_calibration *out, quant_error *err);
/* Scale and zero point of n calibration entries (scale.c) with the kernel set k (NULL: the
 * generic one); `first` is the index of entry 0 in the whole scale, for messages. */
quant_status quant_scale_range(const quant_kernels *k, const quant_plan *plan,
                               quant_dtype scale_dtype, const quant_calibration *calib, int64_t n,
                               float *scale, int32_t *zero_point, int64_t first, quant_error *err);
/* The MSE search of SPEC 9 (mse.c): out holds each group's plain calibration (absmax, or
 * min/max) on entry and the winning shrunk one on return; fills plan->mse_out when set. */
bool quant_plan_is_mse(const quant_plan *plan);
quant_status quant_mse_search(quant_ctx *ctx, const quant_plan *plan, const quant_tensor *x,
                              const quant_calibration *out, quant_error *err);
/* Fills err for a non-finite value found at flat index idx. */
quant_status quant_fail_nonfinite(quant_error *err, int64_t idx);

#endif /* QUANT_INTERNAL_H */
