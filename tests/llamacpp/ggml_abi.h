/* ggml_abi.h -- the few types and entry points of llama.cpp's prebuilt libraries (release
 * v0.5.0, as npm's @node-llama-cpp/linux-x64@3.22.1 ships them) that the llama.cpp lane calls,
 * restated from that release's public headers (ggml.h, gguf.h, ggml-backend.h, llama.h), and the
 * loader that dlopen()s the libraries and resolves them. Nothing of llama.cpp is compiled here:
 * the structs below must match the release's layouts field for field, and only pointers to them
 * or the structs themselves cross the boundary.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_LLAMACPP_GGML_ABI_H
#define QUANT_LLAMACPP_GGML_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- libggml-base: gguf.h and ggml.h ----------------------------------------------------------
 */

#define LC_GGML_MAX_DIMS 4
#define LC_LOG_ERROR     4 /* GGML_LOG_LEVEL_ERROR */

struct gguf_context;
struct ggml_context;
struct ggml_tensor;

/* gguf.h's struct gguf_init_params. */
typedef struct lc_gguf_init_params {
    bool no_alloc;
    struct ggml_context **ctx;
} lc_gguf_init_params;

typedef void (*lc_to_float_fn)(const void *x, float *y, int64_t k);

/* ggml.h's struct ggml_type_traits. */
typedef struct lc_type_traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    lc_to_float_fn to_float;
    void (*from_float_ref)(const float *x, void *y, int64_t k);
} lc_type_traits;

typedef void (*lc_log_fn)(int level, const char *text, void *user);

/* ---- libllama: llama.h ------------------------------------------------------------------------
 */

typedef int32_t lc_token;

/* llama.h's struct llama_model_params. */
typedef struct lc_model_params {
    void **devices;
    const void *tensor_buft_overrides;
    int32_t n_gpu_layers;
    int split_mode;
    int load_mode;
    int lazy_mode;
    int32_t main_gpu;
    const float *tensor_split;
    bool (*progress_callback)(float progress, void *user);
    void *progress_callback_user_data;
    const void *kv_overrides;
    bool vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp;
} lc_model_params;

/* llama.h's struct llama_context_params. */
typedef struct lc_context_params {
    uint32_t n_ctx, n_batch, n_ubatch, n_seq_max, n_rs_seq, n_outputs_max, n_outputs_max_per_seq;
    int32_t n_threads, n_threads_batch;
    int ctx_type, rope_scaling_type, pooling_type, attention_type, flash_attn_type;
    float rope_freq_base, rope_freq_scale, yarn_ext_factor, yarn_attn_factor, yarn_beta_fast,
        yarn_beta_slow;
    uint32_t yarn_orig_ctx;
    float defrag_thold;
    bool (*cb_eval)(void *tensor, bool ask, void *user);
    void *cb_eval_user_data;
    int type_k, type_v;
    bool (*abort_callback)(void *data);
    void *abort_callback_data;
    bool embeddings, offload_kqv, no_perf, op_offload, swa_full, kv_unified;
    void *samplers;
    size_t n_samplers;
    void *ctx_other;
} lc_context_params;

/* llama.h's llama_batch. */
typedef struct lc_batch {
    int32_t n_tokens;
    lc_token *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
} lc_batch;

/* llama.h's struct llama_model_imatrix_data; a list ends with a NULL name. */
typedef struct lc_imatrix_data {
    const char *name;
    const float *data;
    size_t size;
} lc_imatrix_data;

/* llama.h's struct llama_model_quantize_params. */
typedef struct lc_quantize_params {
    int32_t nthread;
    int ftype;
    int output_tensor_type;
    int token_embedding_type;
    bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
    const lc_imatrix_data *imatrix;
    const void *kv_overrides;
    const void *tt_overrides;
    const int32_t *prune_layers;
    size_t max_buf_size;
} lc_quantize_params;

struct llama_model;
struct llama_context;
struct llama_vocab;

/* ---- the loader -------------------------------------------------------------------------------
 */

/* The entry points, resolved by lc_load(). The ggml ones are always there; the llama ones only
 * after lc_load(..., true). */
typedef struct lc_api {
    void *base, *ggml, *llama; /* dlopen handles */
    const char *cpu_variant;   /* the CPU backend library lc_load() registered (with llama) */
    /* libggml-base */
    struct gguf_context *(*gguf_init_from_file)(const char *fname, lc_gguf_init_params params);
    void (*gguf_free)(struct gguf_context *ctx);
    int64_t (*gguf_get_n_tensors)(const struct gguf_context *ctx);
    const char *(*gguf_get_tensor_name)(const struct gguf_context *ctx, int64_t id);
    const int64_t *(*gguf_get_tensor_ne)(const struct gguf_context *ctx, int64_t id);
    int (*gguf_get_tensor_type)(const struct gguf_context *ctx, int64_t id);
    size_t (*gguf_get_tensor_size)(const struct gguf_context *ctx, int64_t id);
    const lc_type_traits *(*ggml_get_type_traits)(int type);
    struct ggml_tensor *(*ggml_get_tensor)(struct ggml_context *ctx, const char *name);
    void *(*ggml_get_data)(const struct ggml_tensor *tensor);
    size_t (*ggml_nbytes)(const struct ggml_tensor *tensor);
    void (*ggml_free)(struct ggml_context *ctx);
    void (*ggml_log_set)(lc_log_fn fn, void *user);
    /* libggml */
    void *(*ggml_backend_load)(const char *path);
    /* libllama */
    void (*llama_backend_init)(void);
    void (*llama_backend_free)(void);
    void (*llama_log_set)(lc_log_fn fn, void *user);
    lc_model_params (*llama_model_default_params)(void);
    lc_context_params (*llama_context_default_params)(void);
    struct llama_model *(*llama_model_load_from_file)(const char *path, lc_model_params params);
    void (*llama_model_free)(struct llama_model *model);
    struct llama_context *(*llama_init_from_model)(struct llama_model *model,
                                                   lc_context_params params);
    void (*llama_free)(struct llama_context *ctx);
    const struct llama_vocab *(*llama_model_get_vocab)(const struct llama_model *model);
    int32_t (*llama_vocab_n_tokens)(const struct llama_vocab *vocab);
    int32_t (*llama_tokenize)(const struct llama_vocab *vocab, const char *text, int32_t text_len,
                              lc_token *tokens, int32_t n_tokens_max, bool add_special,
                              bool parse_special);
    int32_t (*llama_token_to_piece)(const struct llama_vocab *vocab, lc_token token, char *buf,
                                    int32_t length, int32_t lstrip, bool special);
    lc_batch (*llama_batch_get_one)(lc_token *tokens, int32_t n_tokens);
    int32_t (*llama_decode)(struct llama_context *ctx, lc_batch batch);
    float *(*llama_get_logits_ith)(struct llama_context *ctx, int32_t i);
    lc_quantize_params (*llama_model_quantize_default_params)(void);
    uint32_t (*llama_model_quantize)(const char *in, const char *out,
                                     const lc_quantize_params *params);
} lc_api;

/*! lc_load() :
 * dlopen()s libggml-base.so from `dir` and resolves its entry points; with `llama`, also
 * libggml.v0.5.0.so and libllama.v0.5.0.so, and registers one CPU backend with ggml: the AVX2
 * variant (libggml-cpu-haswell.so) when ggml scores it usable on this machine, else the baseline
 * libggml-cpu-x64.so -- never the AMX one ggml's own search could pick. ggml's and llama.cpp's
 * log lines go to stderr only when they are errors (LLAMACPP_VERBOSE=1: all of them).
 * @return : 0, or -1 with a message naming the library and symbol in `msg`. */
int lc_load(lc_api *api, const char *dir, bool llama, char *msg, size_t msg_len);

/*! lc_unload() : closes the libraries lc_load() opened. */
void lc_unload(lc_api *api);

#endif /* QUANT_LLAMACPP_GGML_ABI_H */
