/* quant_gguf_mix.h -- llama-quantize's named mixes (Q4_K_M, Q8_0, IQ4_XS, ...): which ggml type
 * each tensor of a GGUF model gets, chosen exactly as llama.cpp's llama-quantize chooses it for
 * the same model (its layer rules, the output and tied-embedding rule, the fallbacks for row
 * lengths a type cannot hold, no quantization of 1-D tensors and norms), with per-tensor overrides
 * taking the place of llama-quantize's --tensor-type.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_GGUF_MIX_H
#define QUANT_GGUF_MIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant_ckpt.h"
#include "quant_ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One named mix: llama-quantize's TYPE argument. */
typedef struct quant_gguf_mix {
    const char *name;    /* "Q4_K_M", as llama-quantize spells it */
    uint32_t file_type;  /* llama.cpp's llama_ftype, written as general.file_type */
    int default_type;    /* the ggml type of every tensor the mix's rules do not move */
    const char *summary; /* one line for --help and the docs */
} quant_gguf_mix;

/*! quant_gguf_mix_find() :
 * @return : the mix named `name` (case-insensitive: "q4_k_m" finds Q4_K_M), or NULL. */
QUANT_API const quant_gguf_mix *quant_gguf_mix_find(const char *name);

/*! quant_gguf_mix_at() : the i-th mix (0 ..), NULL past the last: for listings. */
QUANT_API const quant_gguf_mix *quant_gguf_mix_at(size_t i);

/* What the mix rules read of the model (GGUF keys ARCH.block_count, ARCH.attention.head_count,
 * ARCH.attention.head_count_kv, ARCH.expert_count; 0 when absent). */
typedef struct quant_gguf_model {
    const char *arch; /* general.architecture ("llama", "falcon", ...) */
    int64_t n_layer;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t n_expert;
} quant_gguf_model;

/* One tensor of the model, as its GGUF tensor info describes it. */
typedef struct quant_gguf_mix_tensor {
    const char *name; /* GGUF name: "blk.0.attn_v.weight" */
    int n_dims;       /* 1..4 */
    int64_t ne[4];    /* ggml order: ne[0] is the row length */
    int type;         /* its ggml type in the input */
    int manual;       /* an explicit per-tensor type (a rule), or -1: the mix decides */
} quant_gguf_mix_tensor;

/* Why a tensor got its type (for plans and reports). */
typedef enum quant_gguf_why {
    QUANT_GGUF_KEPT = 0,     /* not quantized: 1-D, a norm, not a weight, ... (keeps its type) */
    QUANT_GGUF_DEFAULT = 1,  /* the mix's default type */
    QUANT_GGUF_MIX_RULE = 2, /* one of the mix's rules moved it (layer, output, embedding) */
    QUANT_GGUF_MANUAL = 3,   /* an explicit rule chose it */
    QUANT_GGUF_FALLBACK = 4  /* the chosen type cannot hold its row length: llama's fallback */
} quant_gguf_why;

typedef struct quant_gguf_choice {
    int type; /* the ggml type the tensor is written as */
    quant_gguf_why why;
    int wanted; /* the type before a fallback (== type unless why is FALLBACK) */
} quant_gguf_choice;

/*! quant_gguf_mix_choose() :
 * Chooses the type of each of the `n` tensors as llama-quantize does for `mix` (NULL: no mix;
 * then only tensors with a manual type are quantized, and every other keeps its type), given the
 * model's hyper-parameters and whether an importance matrix is given (some mixes differ with
 * one). The counters llama-quantize keeps (attention-v and ffn tensors seen so far) advance in
 * its order, layer number then name, whatever the order of `tensors`. A manual type is honoured
 * only for tensors llama-quantize would quantize at all (whatever the mix, even one that
 * quantizes nothing), then passes the same fallback.
 * @return : QUANT_CK_OK with out[i] filled, or QUANT_CK_ERR_ARG naming the tensor (a type quantd
 *           cannot write, a model with experts whose tensor has no layer number or one out of
 *           range), QUANT_CK_ERR_NOMEM. */
QUANT_API quant_ck_status quant_gguf_mix_choose(const quant_gguf_mix *mix,
                                                const quant_gguf_model *m, bool has_importance,
                                                const quant_gguf_mix_tensor *tensors, size_t n,
                                                quant_gguf_choice *out, quant_ck_error *err);

/*! quant_gguf_quantizable() :
 * @return : true when llama-quantize would quantize a tensor of this name and rank at all
 *           (2-D or more, a ".weight" that is not a norm, a router or one of the small tables
 *           llama.cpp keeps as they are). */
QUANT_API bool quant_gguf_quantizable(const char *name, int n_dims);

#ifdef __cplusplus
}
#endif

#endif /* QUANT_GGUF_MIX_H */
