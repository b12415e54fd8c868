/* quant.h -- libquant public API: qtypes, tensors, calibration, scales, quantize/dequantize,
 * packing and dtype conversions.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The numerics follow docs/numerics.md (Qwix semantics). Everything is computed in
 * IEEE float32 (bf16/f16 inputs widen exactly, f64 inputs round to f32 first) under the default
 * floating-point environment (round to nearest even). Every SIMD path produces the same bits as
 * the scalar path, and every thread count the same bits as one thread.
 *
 * Conventions:
 *  - Functions that can fail return a quant_status and, when `err` is not NULL, fill it with a
 *    message a caller can show. The library never prints, never exits and never aborts on bad
 *    input.
 *  - All buffers are owned by the caller unless a function says otherwise. Sizes come from
 *    quant_scale_shape() and quant_qvalue_bytes().
 *  - A quant_ctx may be used by one thread at a time; distinct contexts are independent. The
 *    free functions that take no context are thread-safe.
 */
#ifndef QUANT_H
#define QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define QUANT_API __attribute__((visibility("default")))
#else
#define QUANT_API
#endif

#define QUANT_VERSION_MAJOR 0
#define QUANT_VERSION_MINOR 1
#define QUANT_VERSION_PATCH 0
#define QUANT_VERSION_NUMBER                                                                       \
    (QUANT_VERSION_MAJOR * 10000 + QUANT_VERSION_MINOR * 100 + QUANT_VERSION_PATCH)

/*! quant_version_number() :
 * @return : QUANT_VERSION_NUMBER of the library actually linked (compare with the header's). */
QUANT_API unsigned quant_version_number(void);

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

/* Status codes. Values are stable: never renumbered, never reused. */
typedef enum quant_status {
    QUANT_OK = 0,
    QUANT_ERR_ARG = 1,         /* invalid argument: NULL pointer, bad rank, bad shape, bad scale */
    QUANT_ERR_QTYPE = 2,       /* unknown qtype name */
    QUANT_ERR_METHOD = 3,      /* malformed calibration method string */
    QUANT_ERR_AXIS = 4,        /* axis out of range, repeated, or both channelwise and tiled */
    QUANT_ERR_TILE = 5,        /* tile size invalid or not dividing its dimension */
    QUANT_ERR_ASYMMETRIC = 6,  /* asymmetric calibration on a qtype that forbids it (nf4, fp8) */
    QUANT_ERR_NONFINITE = 7,   /* NaN or +-Inf in the input; quant_error.index is the first */
    QUANT_ERR_DTYPE = 8,       /* dtype not supported by this operation */
    QUANT_ERR_NOMEM = 9,       /* allocation failed */
    QUANT_ERR_RANGE = 10,      /* a scale is not representable in the requested scale dtype */
    QUANT_ERR_ISA = 11,        /* unknown or unavailable instruction set (QUANT_ISA) */
    QUANT_ERR_THREAD = 12,     /* a worker thread could not be started */
    QUANT_ERR_UNSUPPORTED = 13 /* valid request this qtype cannot do (e.g. stochastic fp8) */
} quant_status;

#define QUANT_ERROR_MESSAGE_MAX 256

/* Filled by failing calls. `index` is the flat row-major element index of the first non-finite
 * input value for QUANT_ERR_NONFINITE, and -1 otherwise. */
typedef struct quant_error {
    quant_status status;
    int64_t index;
    char message[QUANT_ERROR_MESSAGE_MAX];
} quant_error;

/*! quant_status_str() :
 * @return : a static, human-readable name of `status` ("unknown status" if out of range). */
QUANT_API const char *quant_status_str(quant_status status);

/* ---------------------------------------------------------------------------------------------
 * Dtypes (storage element types) and qtypes (logical quantized types)
 * ------------------------------------------------------------------------------------------- */

typedef enum quant_dtype {
    QUANT_DTYPE_F32 = 0,
    QUANT_DTYPE_F16 = 1,
    QUANT_DTYPE_BF16 = 2,
    QUANT_DTYPE_F64 = 3,
    QUANT_DTYPE_F8_E4M3 = 4, /* float8_e4m3fn: no infinities, NaN = S.1111.111 */
    QUANT_DTYPE_F8_E5M2 = 5, /* float8_e5m2: IEEE-like, with infinities */
    QUANT_DTYPE_I8 = 6,
    QUANT_DTYPE_U8 = 7,
    QUANT_DTYPE_I16 = 8,
    QUANT_DTYPE_I32 = 9,
    QUANT_DTYPE_COUNT
} quant_dtype;

/*! quant_dtype_name() : safetensors name ("F32", "BF16", "F8_E4M3", ...), or NULL if invalid. */
QUANT_API const char *quant_dtype_name(quant_dtype dtype);
/*! quant_dtype_size() : bytes per element, or 0 if invalid. */
QUANT_API size_t quant_dtype_size(quant_dtype dtype);
/*! quant_dtype_is_float() : true for F32, F16, BF16, F64 and the two fp8 dtypes. */
QUANT_API bool quant_dtype_is_float(quant_dtype dtype);

/* Logical qtypes. Values are stable: never renumbered, never reused. */
typedef enum quant_qtype {
    QUANT_QTYPE_INT2 = 0,
    QUANT_QTYPE_INT3 = 1,
    QUANT_QTYPE_INT4 = 2,
    QUANT_QTYPE_INT5 = 3,
    QUANT_QTYPE_INT6 = 4,
    QUANT_QTYPE_INT7 = 5,
    QUANT_QTYPE_INT8 = 6,
    QUANT_QTYPE_INT16 = 7,
    QUANT_QTYPE_UINT4 = 8,
    QUANT_QTYPE_UINT8 = 9,
    QUANT_QTYPE_NF4 = 10,
    QUANT_QTYPE_FP8_E4M3FN = 11,
    QUANT_QTYPE_FP8_E5M2 = 12,
    QUANT_QTYPE_MXFP8 = 13,    /* e4m3fn elements, tile 32, power-of-two scale */
    QUANT_QTYPE_MXFP8_16 = 14, /* e4m3fn elements, tile 16, power-of-two scale */
    QUANT_QTYPE_MXFP4 = 15,    /* e2m1 elements, tile 32, power-of-two scale */
    QUANT_QTYPE_NVFP4 = 16,    /* e2m1 elements, tile 16, e4m3fn block scale under a global one */
    /* ggml's block types (quant_ggml.h): scales packed with the codes in blocks of 32 or 256
     * along a row; written by the gguf layout only (quant_quantize() refuses them). */
    QUANT_QTYPE_Q8_0 = 17,
    QUANT_QTYPE_Q4_0 = 18,
    QUANT_QTYPE_Q4_1 = 19,
    QUANT_QTYPE_Q5_0 = 20,
    QUANT_QTYPE_Q5_1 = 21,
    QUANT_QTYPE_Q2_K = 22,
    QUANT_QTYPE_Q3_K = 23,
    QUANT_QTYPE_Q4_K = 24,
    QUANT_QTYPE_Q5_K = 25,
    QUANT_QTYPE_Q6_K = 26,
    QUANT_QTYPE_IQ4_NL = 27,
    QUANT_QTYPE_IQ4_XS = 28,
    QUANT_QTYPE_COUNT
} quant_qtype;

/* How a qtype's codes are computed from a scaled value v (x / scale [+ zero point]). */
typedef enum quant_code_kind {
    QUANT_CODE_INT = 0,   /* round half to even, then saturate to [qmin, qmax] */
    QUANT_CODE_FP8 = 1,   /* clip to +-bound, then round to nearest even into the fp8 format */
    QUANT_CODE_TABLE = 2, /* index of the nearest table level; a tie goes to the lower index */
    QUANT_CODE_FP4 = 3,   /* e2m1: clip to +-6, nearest magnitude, a tie to the even code */
    QUANT_CODE_GGML = 4   /* a ggml block type: quant_ggml.h quantizes it, the gguf layout only */
} quant_code_kind;

/* How a qtype's scale comes from a calibration value. */
typedef enum quant_scale_kind {
    QUANT_SCALE_LINEAR = 0, /* absmax / B (or the asymmetric range), tiny rule, scale dtype */
    QUANT_SCALE_MX = 1,     /* 2^floor(log2 bf16((absmax / B) * C)): OCP MX / Qwix OAS */
    QUANT_SCALE_NVFP4 = 2   /* e4m3fn(absmax / 6 * g) / g under the per-tensor global scale g */
} quant_scale_kind;

/* One row per qtype. */
typedef struct quant_qtype_traits {
    const char *name;             /* canonical name: "int8", "nf4", "float8_e4m3fn", ... */
    int bits;                     /* logical bits per value */
    quant_code_kind kind;         /* how values become codes */
    quant_dtype storage;          /* dtype of one unpacked code: I8, I16, U8, F8_E4M3, F8_E5M2 */
    bool packable;                /* <= 4 bits: stored two per byte when packing is on */
    float symmetric_bound;        /* B in scale = absmax / B */
    bool asymmetric_allowed;      /* minmax and asymmetric fixed ranges allowed */
    int32_t qmin, qmax;           /* asymmetric range; for QUANT_CODE_INT also the clip range */
    quant_dtype zero_point_dtype; /* dtype a stored zero point uses (I8, I16 or U8) */
    /* convert(v): a scaled value to its code, exactly as the quantizer does (no noise). */
    int32_t (*convert)(float v);
    /* level(code): the value a code stands for, before the zero point and scale. */
    float (*level)(int32_t code);
    /* Microscaling qtypes: the fixed tile length on the last contraction axis (0 for
     * the others, which take any tiling), how the scale is derived, and the OAS constant C of
     * QUANT_SCALE_MX (C rounded to float32). Microscaling qtypes take symmetric calibrations
     * (absmax[,f], rms,f) and float32 scales only. */
    int64_t fixed_tile;
    quant_scale_kind scale_kind;
    float scale_constant;
    /* The ggml type (quant_ggml.h) the gguf layout writes this qtype as: the block type itself
     * for QUANT_CODE_GGML rows (fixed_tile is its block), ggml's MXFP4 block for mxfp4; 0 (no
     * qtype is ggml's F32) for qtypes GGUF cannot hold. */
    int ggml_type;
} quant_qtype_traits;

/*! quant_qtype_traits_get() :
 * @return : the traits row of `qtype`, or NULL if `qtype` is out of range. Static storage. */
QUANT_API const quant_qtype_traits *quant_qtype_traits_get(quant_qtype qtype);

/*! quant_qtype_parse() :
 * Parses a qtype name (case-sensitive, canonical names plus the aliases `fp8_e4m3` and
 * `fp8_e5m2`) into `*out`.
 * @return : QUANT_OK, or QUANT_ERR_QTYPE naming the bad value. */
QUANT_API quant_status quant_qtype_parse(const char *name, quant_qtype *out, quant_error *err);

/* The 16 NF4 levels, index 0..15. */
QUANT_API extern const float quant_nf4_levels[16];

/* The 16 e2m1 (fp4) levels by code, sign << 3 | magnitude; code 8 is -0. */
QUANT_API extern const float quant_e2m1_levels[16];

/*! quant_nvfp4_global_scale() :
 * nvfp4's per-tensor global scale from A = max |x| over the whole tensor:
 * g = f32(2688 * f32(1 / max(A, FLT_MIN))); an infinite or NaN g becomes 1.
 * @return : g (positive and finite). */
QUANT_API float quant_nvfp4_global_scale(float amax);

/* ---------------------------------------------------------------------------------------------
 * Tensors
 * ------------------------------------------------------------------------------------------- */

#define QUANT_MAX_RANK 8

/* A borrowed view of an n-d array. Strides are in elements (not bytes) and may be any
 * non-negative values; quant_tensor_init() fills row-major contiguous strides. Rank 0 is a
 * scalar. The library never frees `data`. */
typedef struct quant_tensor {
    quant_dtype dtype;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    int64_t strides[QUANT_MAX_RANK];
    void *data;
} quant_tensor;

/*! quant_tensor_init() :
 * Fills `t` as a contiguous row-major view of `data` with `rank` dims from `shape`.
 * @return : QUANT_OK, or QUANT_ERR_ARG when rank is outside 0..QUANT_MAX_RANK or a dim < 0. */
QUANT_API quant_status quant_tensor_init(quant_tensor *t, quant_dtype dtype, int rank,
                                         const int64_t *shape, void *data, quant_error *err);

/*! quant_numel() : product of `shape[0..rank)`, 1 for rank 0, or -1 on overflow/negative dims. */
QUANT_API int64_t quant_numel(int rank, const int64_t *shape);

/* ---------------------------------------------------------------------------------------------
 * How to quantize
 * ------------------------------------------------------------------------------------------- */

/* A tiled (sub-channel) axis: `size` > 0 is the tile length; otherwise `fraction` in (0, 1]
 * gives round(dim * fraction) (so fraction 1.0 = one shared scale along the axis). */
typedef struct quant_tile {
    int axis;        /* may be negative: -1 is the last axis */
    int64_t size;    /* tile length, or 0 to use `fraction` */
    double fraction; /* used when size == 0 */
} quant_tile;

/* Everything that decides how one tensor is quantized (Qwix's HowToQuantize). Start from
 * quant_how_init(). Axes that are neither channelwise nor tiled are reduced (one scale). */
typedef struct quant_how {
    quant_qtype qtype;
    int n_channel_axes;
    int channel_axes[QUANT_MAX_RANK]; /* one scale per index along these axes */
    int n_tiles;
    quant_tile tiles[QUANT_MAX_RANK]; /* sub-channel tiles; a tiled axis is never channelwise */
    const char *calibration;          /* "<method>[,<args>]"; NULL means "absmax" */
    quant_dtype scale_dtype;          /* F32 (default), BF16 or F16 */
    bool pack;                        /* <= 4-bit qtypes: two codes per byte (default true) */
    bool stochastic;                  /* stochastic rounding (integer qtypes only) */
    uint64_t sr_key;                  /* noise key, from quant_sr_key(seed, tensor name) */
    uint64_t sr_index_base;           /* flat index of this tensor's first element in the whole
                                         tensor, when quantizing a slice (0 otherwise) */
    float global_scale;               /* nvfp4 only: the tensor's global scale g (from
                                         quant_nvfp4_global_scale()); 0 lets quant_quantize()
                                         and quant_fake_quant() derive it from x itself, while
                                         quant_compute_scale() requires it */
    /* MSE calibrations (mse, minmax_mse) only, ignored by the others: */
    const float *importance;          /* importance_len weights, one per index of
                                         importance_axis (the contraction axis), finite and
                                         >= 0; NULL: every weight is 1 */
    int64_t importance_len;           /* must equal the dim of importance_axis */
    int importance_axis;              /* may be negative: -1 is the last axis */
    struct quant_mse_result *mse_out; /* when not NULL, receives the weighted errors */
} quant_how;

/* The errors of an MSE search over one tensor: the sums, over the scale groups in
 * scale order, of sum_j w_j (x_j - dequantize(q_j))^2 with the plain scale (k = 0) and with the
 * winning one. Written by quant_calibrate() / quant_quantize() when how->mse_out is set. */
typedef struct quant_mse_result {
    double err_before; /* k = 0 */
    double err_after;  /* the chosen k of every group */
    int64_t groups;    /* scale groups searched */
    int64_t shrunk;    /* groups whose winner is some k > 0 */
} quant_mse_result;

/* The largest n of mse,n / minmax_mse,n: each group is quantized n + 1 times, and a worker
 * keeps n + 1 float64 errors per scale group of a scale row. */
#define QUANT_MSE_MAX_STEPS 256

/*! quant_mse_ratio() :
 * The shrink factor r_k of the MSE search: the float32 nearest (ties to even) to the exact rational
 * 1 - (1 - lo) * k / n, where lo is the double given. 0 <= k <= n <= QUANT_MSE_MAX_STEPS,
 * 0 <= lo <= 1; anything else returns NaN. */
QUANT_API float quant_mse_ratio(int k, int n, double lo);

/*! quant_how_init() : int8, absmax, per-tensor, f32 scales, packing on, no noise. */
QUANT_API void quant_how_init(quant_how *how, quant_qtype qtype);

/*! quant_how_check() :
 * Validates the shape-independent part of `how`: qtype, calibration method (and whether the
 * qtype allows it), stochastic rounding, scale dtype.
 * @return : QUANT_OK, or QUANT_ERR_QTYPE / QUANT_ERR_METHOD / QUANT_ERR_ASYMMETRIC /
 *           QUANT_ERR_UNSUPPORTED / QUANT_ERR_DTYPE naming the value. */
QUANT_API quant_status quant_how_check(const quant_how *how, quant_error *err);

/*! quant_how_asymmetric() :
 * @return : true when how->calibration is a valid asymmetric method (minmax, or fixed with
 *           a + b != 0), i.e. when quantize writes and dequantize needs a zero point. */
QUANT_API bool quant_how_asymmetric(const quant_how *how);

/*! quant_sr_key() :
 * Derives the stochastic-rounding key from a user seed and the tensor's name, so that each
 * tensor gets its own noise stream and the noise of an element depends only on (seed, name,
 * element index): never on thread count or chunking. `name` may be NULL. */
QUANT_API uint64_t quant_sr_key(uint64_t seed, const char *name);

/*! quant_sr_noise() :
 * @return : the noise added to element `index` under `key`: uniform in [-0.5, 0.5), a multiple of
 *           2^-24 (exact in float32). */
QUANT_API float quant_sr_noise(uint64_t key, uint64_t index);

/* A parsed calibration method. */
typedef enum quant_calib_kind {
    QUANT_CALIB_ABSMAX = 0,
    QUANT_CALIB_MINMAX = 1,
    QUANT_CALIB_RMS = 2,
    QUANT_CALIB_FIXED = 3,
    QUANT_CALIB_MSE = 4,       /* mse[,n[,lo]]: absmax shrunk by the best of n + 1 factors */
    QUANT_CALIB_MINMAX_MSE = 5 /* minmax_mse[,n[,lo]]: min and max shrunk alike */
} quant_calib_kind;

typedef struct quant_calib_method {
    quant_calib_kind kind;
    bool has_factor; /* absmax,f / minmax,f / rms,f */
    double factor;
    double fixed_min; /* fixed,a[,b]: [a, b] (a = -a when one value is given) */
    double fixed_max;
    bool asymmetric; /* minmax, or fixed with a + b != 0 */
    int mse_steps;   /* mse / minmax_mse: n (default 20) */
    double mse_lo;   /* mse / minmax_mse: lo (default 0.5) */
} quant_calib_method;

/*! quant_calib_parse() :
 * Parses "<method>[,<args>]" (case-insensitive, spaces around commas allowed).
 * @return : QUANT_OK, or QUANT_ERR_METHOD with a message naming what is wrong. */
QUANT_API quant_status quant_calib_parse(const char *text, quant_calib_method *out,
                                         quant_error *err);

/*! quant_scale_shape() :
 * Validates `how` against a tensor shape and writes the scale shape (same rank; 1 on reduced
 * axes, dim on channelwise axes, dim/tile on tiled axes, all 1 for `fixed`).
 * @return : QUANT_OK, or QUANT_ERR_AXIS / QUANT_ERR_TILE / QUANT_ERR_METHOD /
 *           QUANT_ERR_ASYMMETRIC / QUANT_ERR_UNSUPPORTED / QUANT_ERR_ARG. */
QUANT_API quant_status quant_scale_shape(const quant_how *how, int rank, const int64_t *shape,
                                         int64_t *scale_shape, quant_error *err);

/*! quant_qvalue_bytes() :
 * @return : bytes needed for the codes of a tensor of this shape (packed along the last axis to
 *           ceil(n/2) bytes per row when how->pack and the qtype is packable), or -1 on bad
 *           arguments or overflow. */
QUANT_API int64_t quant_qvalue_bytes(const quant_how *how, int rank, const int64_t *shape);

/* ---------------------------------------------------------------------------------------------
 * Contexts: instruction set and thread pool
 * ------------------------------------------------------------------------------------------- */

typedef enum quant_isa {
    QUANT_ISA_AUTO = 0, /* the best the CPU has, or $QUANT_ISA when set */
    QUANT_ISA_SCALAR = 1,
    QUANT_ISA_AVX2 = 2, /* AVX2 + FMA + F16C */
    QUANT_ISA_AVX512 = 3,
    QUANT_ISA_NEON = 4,
    QUANT_ISA_COUNT
} quant_isa;

/*! quant_isa_name() : "scalar", "avx2", ... ("auto" for QUANT_ISA_AUTO), NULL if invalid. */
QUANT_API const char *quant_isa_name(quant_isa isa);
/*! quant_isa_supported() : true when this build has kernels for `isa` and the CPU runs them. */
QUANT_API bool quant_isa_supported(quant_isa isa);
/*! quant_isa_best() : the best supported ISA (CPUID is probed once per process). */
QUANT_API quant_isa quant_isa_best(void);

typedef struct quant_ctx quant_ctx;

typedef struct quant_ctx_options {
    int threads;   /* 0 = the CPUs this process may run on; otherwise 1..QUANT_MAX_THREADS */
    quant_isa isa; /* QUANT_ISA_AUTO honours $QUANT_ISA (scalar|avx2|avx512|neon|auto) */
    /* A quantize call on float32 input whose input and code bytes together reach this many
     * stores its unpacked integer codes around the cache (non-temporal stores, where the kernel
     * set has them: AVX-512, per-channel and groups of 64 and more): the codes of a
     * call larger than the cache are out of it by the call's end anyway, and skipping the read
     * for ownership of their lines saves memory traffic. 0 = the default, the last-level cache
     * size the OS reports (QUANT_STREAM_DEFAULT_BYTES when it reports none); < 0 = never.
     * Results are the same bits either way. */
    int64_t stream_min_bytes;
} quant_ctx_options;

#define QUANT_STREAM_DEFAULT_BYTES (32LL << 20)

#define QUANT_MAX_THREADS 256

/*! quant_ctx_new() :
 * Creates a context with its worker threads. `opts` may be NULL (all defaults).
 * @return : a context to release with quant_ctx_free(), or NULL with `err` filled
 *           (QUANT_ERR_ISA for an unknown or unsupported ISA, QUANT_ERR_ARG, QUANT_ERR_NOMEM,
 *           QUANT_ERR_THREAD). */
QUANT_API quant_ctx *quant_ctx_new(const quant_ctx_options *opts, quant_error *err);
/*! quant_ctx_free() : joins the workers and frees `ctx`; NULL is a no-op. */
QUANT_API void quant_ctx_free(quant_ctx *ctx);
/*! quant_ctx_isa(), quant_ctx_threads() : the context's ISA and worker count (ctx not NULL). */
QUANT_API quant_isa quant_ctx_isa(const quant_ctx *ctx);
QUANT_API int quant_ctx_threads(const quant_ctx *ctx);

/* ---------------------------------------------------------------------------------------------
 * Calibration, scales, quantization
 * ------------------------------------------------------------------------------------------- */

/* Calibration result, one value per scale element. Symmetric methods fill `absmax`;
 * asymmetric ones fill `min` (<= 0) and `max` (>= 0). The caller owns the arrays and sizes them
 * to the scale's element count; arrays a method does not fill may be NULL. */
typedef struct quant_calibration {
    bool asymmetric;
    float *absmax;
    float *min;
    float *max;
} quant_calibration;

/*! quant_calibrate() :
 * Reduces `x` (F32, F16, BF16 or F64; any strides) per scale element as `how->calibration` says.
 * rms sums squares in float64 in row-major order (deterministic for any thread count and ISA),
 * then rounds sqrt(sum / n) to float32 and multiplies by the factor in float32.
 * @return : QUANT_OK, or an error (QUANT_ERR_NONFINITE with the first bad index). */
QUANT_API quant_status quant_calibrate(quant_ctx *ctx, const quant_how *how, const quant_tensor *x,
                                       quant_calibration *out, quant_error *err);

/*! quant_absmax_all() :
 * max |x| over the whole of `x` (F32, F16, BF16 or F64; any strides), the A of nvfp4's global
 * scale. Deterministic for any thread count and ISA (max is exact).
 * @return : QUANT_OK, or QUANT_ERR_NONFINITE with the first bad index, QUANT_ERR_ARG. */
QUANT_API quant_status quant_absmax_all(quant_ctx *ctx, const quant_tensor *x, float *amax,
                                        quant_error *err);

/*! quant_compute_scale() :
 * The scale rule for `n` calibration values: scale = absmax / B, or (max - min) / (qmax - qmin)
 * with zero_point = convert(qmin - min / scale); a scale below sqrt(FLT_MIN) becomes 1; the
 * scale is then rounded to how->scale_dtype and the zero point computed from the rounded scale.
 * `scale` receives float32 values exactly representable in the scale dtype. `zero_point` must
 * be non-NULL for asymmetric calibrations and is left untouched otherwise.
 * Microscaling qtypes use their own rule instead: the MX power of two, or nvfp4's effective scale
 * e_b = f32(s_b / g) with g = how->global_scale (which must then be set).
 * @return : QUANT_OK, or QUANT_ERR_RANGE when a scale rounds to 0 or infinity in the scale
 *           dtype, QUANT_ERR_ASYMMETRIC, QUANT_ERR_ARG (also nvfp4 without a global scale). */
QUANT_API quant_status quant_compute_scale(const quant_how *how, const quant_calibration *calib,
                                           int64_t n, float *scale, int32_t *zero_point,
                                           quant_error *err);

/*! quant_quantize_with_scale() :
 * q = convert(x / scale [+ zero_point]) with the given scale (shape from quant_scale_shape()) and
 * zero point, which must be given exactly when how->calibration is asymmetric
 * (quant_how_asymmetric()); the calibration method is otherwise not used. Codes go to `q`
 * (quant_qvalue_bytes() bytes; storage dtype per the traits; packed two per byte along the last
 * axis when how->pack and the qtype is packable: element 2i in the low nibble, 2i+1 in the high
 * one).
 * @return : QUANT_OK, QUANT_ERR_NONFINITE (index of the first NaN/Inf; `q` is then
 *           unspecified), QUANT_ERR_ARG for a scale that is not positive and finite, ... */
QUANT_API quant_status quant_quantize_with_scale(quant_ctx *ctx, const quant_how *how,
                                                 const quant_tensor *x, const float *scale,
                                                 const int32_t *zero_point, void *q,
                                                 quant_error *err);

/*! quant_quantize() :
 * Dynamic-range quantization: calibrate, compute the scale, quantize, bit-identical to running
 * the three steps, in one pass over memory when each scale row covers one row of `x`.
 * `zero_point` is written only for asymmetric calibrations (may be NULL otherwise).
 * @return : as quant_calibrate() and quant_quantize_with_scale(). */
QUANT_API quant_status quant_quantize(quant_ctx *ctx, const quant_how *how, const quant_tensor *x,
                                      void *q, float *scale, int32_t *zero_point, quant_error *err);

/*! quant_dequantize() :
 * out = (level(q) - zero_point) * scale, in float32, stored as out->dtype (F32, F16, BF16 with
 * round to nearest even). `out` gives the shape (strides are honoured); `q` is laid out as
 * quant_quantize() writes it. `zero_point` must be given exactly when how->calibration is
 * asymmetric, and each lie in the qtype's [qmin, qmax] (as every zero point quant_quantize()
 * writes does).
 * @return : QUANT_OK, or QUANT_ERR_ARG (also for a missing or unexpected zero point, or one out
 *           of range) / QUANT_ERR_DTYPE / QUANT_ERR_TILE ... */
QUANT_API quant_status quant_dequantize(quant_ctx *ctx, const quant_how *how, const void *q,
                                        const float *scale, const int32_t *zero_point,
                                        quant_tensor *out, quant_error *err);

/*! quant_fake_quant() :
 * out = dequantize(quantize(x)), bit-identical to the two steps. `out` has x's shape and dtype
 * F32, F16 or BF16. Temporary storage is allocated and freed inside.
 * @return : as quant_quantize(). */
QUANT_API quant_status quant_fake_quant(quant_ctx *ctx, const quant_how *how, const quant_tensor *x,
                                        quant_tensor *out, quant_error *err);

/*! quant_error_stats : how far fake-quant lands from the input. SQNR in dB is
 * 10 * log10(sum_sq_x / sum_sq_err) (infinite when sum_sq_err is 0). */
typedef struct quant_error_stats {
    double sum_sq_x;    /* sum of x^2 over the tensor */
    double sum_sq_err;  /* sum of (x - dequantize(q))^2 */
    double max_abs_err; /* largest |x - dequantize(q)| (differences taken in double) */
} quant_error_stats;

/*! quant_measure_error() :
 * Compares x with the dequantized codes `q` (+ scale, + zero_point, as quant_quantize() wrote
 * them for x) in one parallel pass without materialising the dequantized tensor. The result
 * does not depend on the thread count or the ISA. Sums are in double, per work item, added in
 * order.
 * @return : QUANT_OK with *out, or as quant_dequantize(). */
QUANT_API quant_status quant_measure_error(quant_ctx *ctx, const quant_how *how,
                                           const quant_tensor *x, const void *q, const float *scale,
                                           const int32_t *zero_point, quant_error_stats *out,
                                           quant_error *err);

/*! quant_quantize_measured(), quant_quantize_with_scale_measured() :
 * quant_quantize() / quant_quantize_with_scale() that also fill *stats (when not NULL) with the
 * error of the codes they wrote, taken in the same pass over memory (each span is dequantized
 * while it is still in cache): bit-identical to quant_measure_error() on their outputs, whatever
 * the ISA and thread count. Outputs as the plain calls; *stats is zero unless QUANT_OK.
 * @return : as quant_quantize() / quant_quantize_with_scale(). */
QUANT_API quant_status quant_quantize_measured(quant_ctx *ctx, const quant_how *how,
                                               const quant_tensor *x, void *q, float *scale,
                                               int32_t *zero_point, quant_error_stats *stats,
                                               quant_error *err);
QUANT_API quant_status quant_quantize_with_scale_measured(quant_ctx *ctx, const quant_how *how,
                                                          const quant_tensor *x, const float *scale,
                                                          const int32_t *zero_point, void *q,
                                                          quant_error_stats *stats,
                                                          quant_error *err);

/* ---------------------------------------------------------------------------------------------
 * Packing of <= 4-bit codes
 * ------------------------------------------------------------------------------------------- */

/*! quant_pack_nibbles() :
 * Packs `rows` rows of `n` codes (low 4 bits of each byte of `codes`) into rows of ceil(n/2)
 * bytes: code 2i in the low nibble, 2i+1 in the high nibble; an odd row ends with a zero high
 * nibble. Signed codes are stored as 4-bit two's complement. */
QUANT_API void quant_pack_nibbles(const uint8_t *codes, int64_t rows, int64_t n, uint8_t *packed);

/*! quant_unpack_nibbles() :
 * The inverse: writes `rows` x `n` bytes to `codes`, sign-extending each nibble when
 * `sign_extend` (int2..int4) and zero-extending otherwise (uint4, nf4 indices). */
QUANT_API void quant_unpack_nibbles(const uint8_t *packed, int64_t rows, int64_t n,
                                    bool sign_extend, uint8_t *codes);

/* ---------------------------------------------------------------------------------------------
 * Dtype conversions
 * ------------------------------------------------------------------------------------------- */

/* Scalar conversions. Narrowing rounds to nearest even. f32 -> f16 overflows to infinity;
 * f32 -> e5m2 overflows to infinity; f32 -> e4m3fn overflows to NaN (the format has no
 * infinity). NaN stays NaN (quiet). The quantizer itself clips before converting. */
QUANT_API float quant_f16_to_f32(uint16_t h);
QUANT_API uint16_t quant_f32_to_f16(float f);
QUANT_API float quant_bf16_to_f32(uint16_t b);
QUANT_API uint16_t quant_f32_to_bf16(float f);
QUANT_API float quant_e4m3fn_to_f32(uint8_t code);
QUANT_API uint8_t quant_f32_to_e4m3fn(float f);
QUANT_API float quant_e5m2_to_f32(uint8_t code);
QUANT_API uint8_t quant_f32_to_e5m2(float f);

/*! quant_convert() :
 * Converts `n` elements between float dtypes (F32, F16, BF16, F64, F8_E4M3, F8_E5M2), through
 * float32 (so F64 -> F16 rounds twice, as every F64 input does).
 * @return : QUANT_OK, or QUANT_ERR_DTYPE / QUANT_ERR_ARG. */
QUANT_API quant_status quant_convert(quant_dtype src_dtype, const void *src, quant_dtype dst_dtype,
                                     void *dst, int64_t n, quant_error *err);

#ifdef __cplusplus
}
#endif
#endif /* QUANT_H */
