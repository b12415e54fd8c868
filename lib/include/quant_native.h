/* quant_native.h -- reading the native layout: which tensors of a safetensors
 * file are the NAME.qvalue, NAME.scale and NAME.zero_point parts of one quantized tensor NAME,
 * with its original shape and dtype and the quant_how that reproduces its stored scale. One
 * reader for every consumer: `quant dequantize` (quant_dequantize_path) and `quant inspect`.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_NATIVE_H
#define QUANT_NATIVE_H

#include "quant_st.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One quantized tensor of a native-layout file. Pointers point into the quant_st_file and the
 * quant_native it came from; they live as long as both. */
typedef struct quant_native_tensor {
    const char *name;                  /* NAME, the tensor before quantization */
    const quant_st_tensor *qvalue;     /* NAME.qvalue: the codes */
    const quant_st_tensor *scale;      /* NAME.scale */
    const quant_st_tensor *zero_point; /* NAME.zero_point, or NULL (symmetric) */
    quant_how how;                     /* qtype, packing, axes and tiles of the stored scale */
    const char *orig_dtype;            /* the dtype name before quantization, or NULL if absent */
    int rank;                          /* orig_shape */
    int64_t shape[QUANT_MAX_RANK];
    bool has_global_scale; /* nvfp4: the per-tensor global scale g the file records */
    double global_scale;   /* (its block scales are stored as f32(s_b / g) already) */
} quant_native_tensor;

/* The quantized tensors of one file, in the order of its `quantization` metadata. */
typedef struct quant_native {
    const quant_st_file *file;
    bool has_metadata;  /* the file has a `quantization` metadata entry */
    const char *format; /* its "format" value, or NULL */
    size_t n;
    quant_native_tensor *tensors;
    const quant_native_tensor **owner_; /* private: per file tensor, the entry it is part of */
    void *meta_;                        /* private: the parsed metadata the names point into */
} quant_native;

/*! quant_native_read() :
 * Reads the `quantization` metadata of `f` and matches every entry with its parts. A file
 * without that metadata has no quantized tensors (n = 0): every tensor is a plain one.
 * @return : QUANT_CK_OK with `*out` to release with quant_native_free(), or
 *           QUANT_CK_ERR_FORMAT naming the file and tensor when the metadata is malformed, lists
 *           a tensor whose .qvalue or .scale is missing, or shapes that do not agree;
 *           QUANT_CK_ERR_NOMEM. On failure `*out` holds nothing to free. */
QUANT_API quant_ck_status quant_native_read(const quant_st_file *f, quant_native *out,
                                            quant_ck_error *err);

/*! quant_native_owner() : the quantized tensor whose part `t` (a tensor of n->file) is, or NULL
 * when `t` is a plain tensor. */
QUANT_API const quant_native_tensor *quant_native_owner(const quant_native *n,
                                                        const quant_st_tensor *t);

/*! quant_native_free() : releases what quant_native_read() allocated; NULL-safe. */
QUANT_API void quant_native_free(quant_native *n);

#ifdef __cplusplus
}
#endif
#endif /* QUANT_NATIVE_H */
