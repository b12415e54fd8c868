/* quant_ctensors.h -- reading the compressed-tensors layout (vLLM / llm-compressor; what
 * `quant quantize --layout compressed-tensors` writes): the `quantization_config` of a
 * checkpoint's config.json, which tensors of a safetensors file are the parts of one quantized
 * Linear weight P.weight (P.weight_packed or P.weight, P.weight_scale, P.weight_zero_point,
 * P.weight_global_scale, P.weight_shape), the quant_how that decodes them, and the decoding.
 * One reader for `quant dequantize` (quant_dequantize_path) and any other consumer.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_CTENSORS_H
#define QUANT_CTENSORS_H

#include "quant_st.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a weight's codes are stored. */
typedef enum quant_ct_form {
    QUANT_CT_INT8,   /* P.weight I8, one integer code a byte (int-quantized, naive-quantized) */
    QUANT_CT_PACK32, /* P.weight_packed I32 + P.weight_shape: codes + 2^(b-1) packed densely,
                        LSB first, along each row (pack-quantized) */
    QUANT_CT_FP8,    /* P.weight F8_E4M3 with float scales (float-quantized, naive-quantized) */
    QUANT_CT_MXFP4,  /* P.weight_packed U8, two e2m1 codes a byte, E8M0 scales (U8) */
    QUANT_CT_MXFP8,  /* P.weight F8_E4M3, E8M0 scales (U8) */
    QUANT_CT_NVFP4,  /* P.weight_packed U8, F8_E4M3 block scales s_b under P.weight_global_scale */
    QUANT_CT_FORMS
} quant_ct_form;

/* A parsed `quantization_config` (opaque). */
typedef struct quant_ct_config quant_ct_config;

/*! quant_ct_config_parse() :
 * Reads the JSON text of a config.json (`path` names it in messages). A text without a
 * `quantization_config` whose quant_method is "compressed-tensors" (not JSON, not an object, a
 * float model's config) gives *out = NULL and QUANT_CK_OK: it describes no quantized weights. Every
 * format named (each config group's "format", else the top-level one) must be one this reader
 * decodes: pack-quantized, int-quantized, naive-quantized, float-quantized, nvfp4-pack-quantized,
 * mxfp4-pack-quantized, mxfp8-quantized (or dense / mixed-precision at the top level).
 * @return : QUANT_CK_OK with *out to release with quant_ct_config_free(), or
 *           QUANT_CK_ERR_FORMAT (a malformed quantization_config),
 *           QUANT_CK_ERR_UNSUPPORTED naming the file, the config group and the format (a format
 *           string this reader does not know, a quantization_status other than "compressed"),
 *           QUANT_CK_ERR_NOMEM. */
QUANT_API quant_ck_status quant_ct_config_parse(const char *text, const char *path,
                                                quant_ct_config **out, quant_ck_error *err);

/*! quant_ct_config_beside() :
 * quant_ct_config_parse() of the config.json in the directory of the safetensors file `file`
 * (a shard of a checkpoint directory), read up to 64 MiB; none there gives *out = NULL and
 * QUANT_CK_OK. For `quant inspect FILE`.
 * @return : as quant_ct_config_parse(), or QUANT_CK_ERR_IO naming config.json. */
QUANT_API quant_ck_status quant_ct_config_beside(const char *file, quant_ct_config **out,
                                                 quant_ck_error *err);

/*! quant_ct_config_free() : NULL-safe. */
QUANT_API void quant_ct_config_free(quant_ct_config *cfg);

/*! quant_ct_config_strip() :
 * The JSON text of config.json without its `quantization_config` (what a dequantized checkpoint
 * carries: its weights are float again), indented by 2, keys in their order; malloc'd.
 * @return : the text, or NULL with `err` set (not a JSON object; out of memory). */
QUANT_API char *quant_ct_config_strip(const char *text, quant_ck_error *err);

/* One quantized weight of a compressed-tensors file. Pointers point into the quant_st_file and
 * the quant_ct it came from; they live as long as both. */
typedef struct quant_ct_tensor {
    char *name;                          /* P.weight: the float tensor it decodes to */
    const char *format;                  /* the compressed-tensors format it is read as */
    quant_ct_form form;                  /* how its codes are stored */
    int bits;                            /* bits per code */
    const quant_st_tensor *data;         /* P.weight_packed or P.weight: the codes */
    const quant_st_tensor *scale;        /* P.weight_scale */
    const quant_st_tensor *zero_point;   /* P.weight_zero_point, or NULL (symmetric) */
    const quant_st_tensor *global_scale; /* nvfp4: P.weight_global_scale F32 [1] */
    const quant_st_tensor *shape_t;      /* pack-quantized: P.weight_shape, else NULL */
    bool zp_packed;                      /* the zero point is int32 words packed along dim 0 */
    quant_how how;                       /* qtype, axes and tiles of the scale, packing */
    int64_t shape[2];                    /* [out, in] of P.weight */
} quant_ct_tensor;

/* The quantized weights of one file, in file order of their P.weight_scale. */
typedef struct quant_ct {
    const quant_st_file *file;
    size_t n;
    quant_ct_tensor *tensors;
    const quant_ct_tensor **owner_; /* private: per file tensor, the entry it is part of */
} quant_ct;

/*! quant_ct_looks_like() : whether `f` holds compressed-tensors weights: some P.weight_scale
 * beside a P.weight_packed, or beside a P.weight that is not a float. */
QUANT_API bool quant_ct_looks_like(const quant_st_file *f);

/*! quant_ct_read() :
 * Finds every P.weight_scale of `f` and matches it with its parts. The scheme of each weight
 * comes from its tensors (dtypes and shapes) and, when `cfg` is given, from the config group
 * whose targets name the module P exactly (or the config's only group): its format must agree
 * with the tensors, and it gives pack-quantized's num_bits (without it, num_bits is the one
 * width whose dense packing has weight_packed's shape). The strategy (tensor, channel, group,
 * block; mx and nvfp4 groups of 32 and 16) comes from the scale's shape.
 * @return : QUANT_CK_OK with `*out` to release with quant_ct_free(), or, naming the file and
 *           the tensor: QUANT_CK_ERR_FORMAT (a missing part: the codes, weight_shape, the global
 *           scale; a shape or dtype that does not fit the scheme, e.g. a wrong packed shape),
 *           QUANT_CK_ERR_UNSUPPORTED (activation ordering's weight_g_idx, a float P.weight
 *           beside a scale, a format that does not fit the tensors, a group that does not divide
 *           the input), QUANT_CK_ERR_NOMEM. On failure `*out` holds nothing to free. */
QUANT_API quant_ck_status quant_ct_read(const quant_st_file *f, const quant_ct_config *cfg,
                                        quant_ct *out, quant_ck_error *err);

/*! quant_ct_owner() : the quantized weight whose part `t` (a tensor of c->file) is, or NULL
 * when `t` is a plain tensor (input_scale and the other activation parameters are plain). */
QUANT_API const quant_ct_tensor *quant_ct_owner(const quant_ct *c, const quant_st_tensor *t);

/*! quant_ct_free() : releases what quant_ct_read() allocated; NULL-safe. */
QUANT_API void quant_ct_free(quant_ct *c);

/*! quant_ct_scales() :
 * The effective float32 scales of weight `e` of `c` (n = the number of elements of
 * e->scale), as quant_ct_dequantize() multiplies by: float dtypes converted; E8M0 bytes e give
 * 2^(e - 127); nvfp4's e4m3fn bytes s_b give f32(s_b / g). For `quant inspect` and any reader.
 * @return : QUANT_CK_OK, or QUANT_CK_ERR_FORMAT / QUANT_CK_ERR_IO / QUANT_CK_ERR_NOMEM /
 *           QUANT_CK_ERR_ARG as quant_ct_dequantize(). */
QUANT_API quant_ck_status quant_ct_scales(const quant_ct *c, const quant_ct_tensor *e, float *scale,
                                          size_t n, quant_ck_error *err);

/*! quant_ct_dequantize() :
 * Decodes weight `e` of `c` into `out` (`out_len` bytes: shape[0] * shape[1] values of `dtype`,
 * F32, BF16 or F16): (level(q) - zero_point) * scale in float32 through quant_dequantize(), so
 * the result equals the native layout's of the same codes and scales bit for bit. Scales: float
 * dtypes converted to float32; E8M0 bytes e give 2^(e - 127); nvfp4's e4m3fn bytes s_b give
 * f32(s_b / g). compressed-tensors' own decompression multiplies in the scale's dtype: with a
 * BF16 (F16) weight_scale its values are these rounded to bfloat16 (float16): `dtype` BF16
 * (F16) gives them exactly.
 * @return : QUANT_CK_OK, or QUANT_CK_ERR_FORMAT naming the file and tensor (an E8M0 byte 255,
 *           which is NaN; a NaN nvfp4 block scale; a global scale that is not finite and
 *           positive), QUANT_CK_ERR_IO, QUANT_CK_ERR_QUANT (naming the file and weight),
 *           QUANT_CK_ERR_NOMEM. */
QUANT_API quant_ck_status quant_ct_dequantize(quant_ctx *ctx, const quant_ct *c,
                                              const quant_ct_tensor *e, quant_st_dtype dtype,
                                              void *out, size_t out_len, quant_ck_error *err);

#ifdef __cplusplus
}
#endif
#endif /* QUANT_CTENSORS_H */
