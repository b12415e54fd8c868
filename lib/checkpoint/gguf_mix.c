/* gguf_mix.c -- llama-quantize's named mixes: the mix table and the per-tensor type choice
 * (quant_gguf_mix.h). The rules are llama.cpp's (llama-quant.cpp: tensor_allows_quantization,
 * llama_tensor_get_type, tensor_type_fallback), restated for the mixes quantd writes; a model
 * quantized by a mix here gets the same type per tensor as llama-quantize gives it.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"
#include "quant_gguf_mix.h"

#define RETURN_IF_FAILED(expr)                                                                     \
    do {                                                                                           \
        quant_ck_status st_ = (expr);                                                              \
        if (st_ != QUANT_CK_OK) return st_;                                                        \
    } while (0)

/* llama.cpp's llama_ftype values (general.file_type) of the mixes below. */
enum {
    FT_F32 = 0,
    FT_F16 = 1,
    FT_Q4_0 = 2,
    FT_Q4_1 = 3,
    FT_Q8_0 = 7,
    FT_Q5_0 = 8,
    FT_Q5_1 = 9,
    FT_Q2_K = 10,
    FT_Q3_K_S = 11,
    FT_Q3_K_M = 12,
    FT_Q3_K_L = 13,
    FT_Q4_K_S = 14,
    FT_Q4_K_M = 15,
    FT_Q5_K_S = 16,
    FT_Q5_K_M = 17,
    FT_Q6_K = 18,
    FT_IQ4_NL = 25,
    FT_IQ4_XS = 30,
    FT_BF16 = 32,
    FT_MXFP4_MOE = 38
};

static const quant_gguf_mix mixes[] = {
    {"Q8_0", FT_Q8_0, QUANT_GGML_Q8_0, "8.5 bits per weight: every matrix q8_0"},
    {"Q6_K", FT_Q6_K, QUANT_GGML_Q6_K, "6.6 bpw: every matrix q6_k"},
    {"Q5_K_M", FT_Q5_K_M, QUANT_GGML_Q5_K,
     "q5_k; half of attn_v and ffn_down (first, last and every third layer) q6_k"},
    {"Q5_K_S", FT_Q5_K_S, QUANT_GGML_Q5_K, "q5_k throughout, output q6_k"},
    {"Q4_K_M", FT_Q4_K_M, QUANT_GGML_Q4_K,
     "q4_k; half of attn_v and ffn_down (first, last and every third layer) q6_k"},
    {"Q4_K_S", FT_Q4_K_S, QUANT_GGML_Q4_K,
     "q4_k; the first 4 attn_v and the first eighth of ffn_down q5_k"},
    {"Q3_K_L", FT_Q3_K_L, QUANT_GGML_Q3_K, "q3_k; attn_v, attn_output and ffn_down q5_k"},
    {"Q3_K_M", FT_Q3_K_M, QUANT_GGML_Q3_K,
     "q3_k; attn_v, attn_output and ffn_down q4_k (the first layers' q5_k)"},
    {"Q3_K_S", FT_Q3_K_S, QUANT_GGML_Q3_K, "q3_k throughout, output q6_k"},
    {"Q2_K", FT_Q2_K, QUANT_GGML_Q2_K, "q2_k; attn_v q3_k/q4_k, ffn_down and attn_output q3_k"},
    {"IQ4_NL", FT_IQ4_NL, QUANT_GGML_IQ4_NL, "iq4_nl (non-linear 4-bit, blocks of 32)"},
    {"IQ4_XS", FT_IQ4_XS, QUANT_GGML_IQ4_XS, "iq4_xs (non-linear 4-bit, super-blocks of 256)"},
    {"Q4_0", FT_Q4_0, QUANT_GGML_Q4_0, "q4_0 (with importance: the first ffn_down q4_1)"},
    {"Q4_1", FT_Q4_1, QUANT_GGML_Q4_1, "q4_1 throughout, output q6_k"},
    {"Q5_0", FT_Q5_0, QUANT_GGML_Q5_0, "q5_0 (with importance: the first ffn_down q5_1)"},
    {"Q5_1", FT_Q5_1, QUANT_GGML_Q5_1, "q5_1 throughout, output q6_k"},
    {"MXFP4_MOE", FT_MXFP4_MOE, QUANT_GGML_MXFP4, "mxfp4 experts, q8_0 everything else"},
    {"F16", FT_F16, QUANT_GGML_F16, "f16, nothing quantized"},
    {"BF16", FT_BF16, QUANT_GGML_BF16, "bf16, nothing quantized"},
    {"F32", FT_F32, QUANT_GGML_F32, "f32, nothing quantized"},
};

#define N_MIXES (sizeof mixes / sizeof mixes[0])

const quant_gguf_mix *quant_gguf_mix_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < N_MIXES; i++) {
        const char *a = mixes[i].name, *b = name;
        while (*a && toupper((unsigned char)*b) == *a) a++, b++;
        if (!*a && !*b) return &mixes[i];
    }
    return NULL;
}

const quant_gguf_mix *quant_gguf_mix_at(size_t i)
{
    return i < N_MIXES ? &mixes[i] : NULL;
}

/* ---- which tensors are quantized at all ------------------------------------------------------ */

/* Substrings that keep a tensor as it is (llama.cpp's small or special tables). */
static const char *const kept_parts[] = {
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
};

bool quant_gguf_quantizable(const char *name, int n_dims)
{
    if (!name || n_dims < 2) return false;
    size_t len = strlen(name);
    if (len < 6 || strcmp(name + len - 6, "weight")) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    for (size_t i = 0; i < sizeof kept_parts / sizeof kept_parts[0]; i++)
        if (strstr(name, kept_parts[i])) return false;
    return true;
}

/* ---- categories and counters ------------------------------------------------------------------
 */

typedef enum category {
    CAT_OTHER = 0,
    CAT_OUTPUT,
    CAT_TOKEN_EMBD,
    CAT_ATTN_QKV,
    CAT_ATTN_KV_B,
    CAT_ATTN_V,
    CAT_ATTN_K,
    CAT_ATTN_Q,
    CAT_ATTN_OUTPUT,
    CAT_FFN_UP,
    CAT_FFN_GATE,
    CAT_FFN_DOWN
} category;

/* In llama.cpp's order of tests: the first that matches decides. */
static const struct {
    const char *part;
    category cat;
} category_parts[] = {
    {"attn_qkv.weight", CAT_ATTN_QKV},
    {"attn_kv_b.weight", CAT_ATTN_KV_B},
    {"attn_v.weight", CAT_ATTN_V},
    {"attn_k.weight", CAT_ATTN_K},
    {"attn_q.weight", CAT_ATTN_Q},
    {"attn_output.weight", CAT_ATTN_OUTPUT},
    {"ffn_up", CAT_FFN_UP},
    {"ffn_gate", CAT_FFN_GATE},
    {"ffn_down", CAT_FFN_DOWN},
};

static category category_of(const char *name)
{
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight"))
        return CAT_TOKEN_EMBD;
    for (size_t i = 0; i < sizeof category_parts / sizeof category_parts[0]; i++)
        if (strstr(name, category_parts[i].part)) return category_parts[i].cat;
    return CAT_OTHER;
}

static bool is_attn_v(category c)
{
    return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B;
}

/* The state llama-quantize carries from tensor to tensor. */
typedef struct mix_state {
    const quant_gguf_mix *mix;
    const quant_gguf_model *m;
    bool has_importance, falcon, is_70b, tied_embeddings;
    int64_t n_gqa, n_expert;
    int64_t n_attention_wv, i_attention_wv;
    int64_t n_layer, i_ffn_down, i_ffn_gate, i_ffn_up;
} mix_state;

static bool use_more_bits(int64_t i, int64_t n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int64_t block_of(int type)
{
    const quant_ggml_traits *t = quant_ggml_traits_get(type);
    return t ? t->block : 0;
}

static bool is_quantized(int type)
{
    const quant_ggml_traits *t = quant_ggml_traits_get(type);
    return t && t->quantized;
}

/* The layer a per-layer counter stands for: the counter itself, or for models with experts the
 * number in the name's "blk.N." (llama.cpp's layer_info). */
static quant_ck_status layer_of(const mix_state *s, int64_t counter, const char *name, int64_t *out,
                                quant_ck_error *err)
{
    *out = counter;
    if (s->n_expert <= 1) return QUANT_CK_OK;
    long long layer;
    if (sscanf(name, "blk.%lld.", &layer) != 1)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "tensor '%s': no layer number in its name",
                             name);
    if (layer < 0 || layer >= s->n_layer)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "tensor '%s': layer %lld is outside [0, %lld)",
                             name, layer, (long long)s->n_layer);
    *out = layer;
    return QUANT_CK_OK;
}

/* ---- the mix rules per category (llama_tensor_get_type_impl, for quantd's mixes) ------------ */

static int output_type(const mix_state *s, const quant_gguf_mix_tensor *t, int type)
{
    if (s->mix->file_type == FT_MXFP4_MOE) return QUANT_GGML_Q8_0;
    int64_t blk = block_of(type);
    if (s->falcon || blk <= 0 || t->ne[0] % blk) return QUANT_GGML_Q8_0;
    return type != QUANT_GGML_Q8_0 ? QUANT_GGML_Q6_K : type;
}

static int attn_v_type(mix_state *s, int type)
{
    uint32_t ft = s->mix->file_type;
    if (ft == FT_Q2_K)
        type = s->n_gqa >= 4 ? QUANT_GGML_Q4_K : QUANT_GGML_Q3_K;
    else if (ft == FT_Q3_K_M)
        type = s->i_attention_wv < 2 ? QUANT_GGML_Q5_K : QUANT_GGML_Q4_K;
    else if (ft == FT_Q3_K_L)
        type = QUANT_GGML_Q5_K;
    else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && s->n_gqa >= 4)
        type = QUANT_GGML_Q5_K;
    else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) &&
             use_more_bits(s->i_attention_wv, s->n_attention_wv))
        type = QUANT_GGML_Q6_K;
    else if (ft == FT_Q4_K_S && s->i_attention_wv < 4)
        type = QUANT_GGML_Q5_K;
    if (s->is_70b && (type == QUANT_GGML_Q3_K || type == QUANT_GGML_Q4_K)) type = QUANT_GGML_Q5_K;
    if (s->n_expert == 8) type = QUANT_GGML_Q8_0;
    s->i_attention_wv++;
    return type;
}

static int ffn_down_type(const mix_state *s, int64_t i, int type)
{
    int64_t n = s->n_layer;
    uint32_t ft = s->mix->file_type;
    if (ft == FT_Q2_K) return QUANT_GGML_Q3_K;
    if (ft == FT_Q3_K_M)
        return i < n / 16                          ? QUANT_GGML_Q5_K
               : !s->falcon || use_more_bits(i, n) ? QUANT_GGML_Q4_K
                                                   : QUANT_GGML_Q3_K;
    if (ft == FT_Q3_K_L) return s->falcon ? QUANT_GGML_Q4_K : QUANT_GGML_Q5_K;
    if (ft == FT_Q4_K_M) {
        if (s->falcon)
            return i < n / 16            ? QUANT_GGML_Q6_K
                   : use_more_bits(i, n) ? QUANT_GGML_Q5_K
                                         : QUANT_GGML_Q4_K;
        return use_more_bits(i, n) ? QUANT_GGML_Q6_K : type;
    }
    if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS) && !s->has_importance)
        return QUANT_GGML_Q5_K;
    if (ft == FT_Q5_K_M) return use_more_bits(i, n) ? QUANT_GGML_Q6_K : type;
    if (ft == FT_Q4_K_S) return !s->falcon && i < n / 8 ? QUANT_GGML_Q5_K : type;
    if ((ft == FT_Q4_0 || ft == FT_Q5_0) && s->has_importance && i < n / 8)
        return ft == FT_Q4_0 ? QUANT_GGML_Q4_1 : QUANT_GGML_Q5_1;
    return type;
}

/* Mixes whose attn_output becomes q5_k in a model with 8 experts. */
static bool moe8_attn_output_q5k(uint32_t ft)
{
    return ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL ||
           ft == FT_Q4_K_S || ft == FT_Q4_K_M || ft == FT_IQ4_XS;
}

static int attn_output_type(const mix_state *s, int type)
{
    uint32_t ft = s->mix->file_type;
    if (s->falcon) return ft == FT_Q3_K_L ? QUANT_GGML_Q4_K : type;
    if (s->n_expert == 8) return moe8_attn_output_q5k(ft) ? QUANT_GGML_Q5_K : type;
    if (ft == FT_Q2_K) return QUANT_GGML_Q3_K;
    if (ft == FT_Q3_K_M) return QUANT_GGML_Q4_K;
    if (ft == FT_Q3_K_L) return QUANT_GGML_Q5_K;
    return type;
}

static int qkv_type(const mix_state *s, int type)
{
    uint32_t ft = s->mix->file_type;
    if (ft == FT_Q3_K_M || ft == FT_Q3_K_L) return QUANT_GGML_Q4_K;
    if (ft == FT_Q4_K_M) return QUANT_GGML_Q5_K;
    if (ft == FT_Q5_K_M) return QUANT_GGML_Q6_K;
    return type;
}

static quant_ck_status mix_type(mix_state *s, const quant_gguf_mix_tensor *t, category cat,
                                int *type, quant_ck_error *err)
{
    int64_t layer;
    if (cat == CAT_OUTPUT || (s->tied_embeddings && cat == CAT_TOKEN_EMBD)) {
        *type = output_type(s, t, *type);
    } else if (s->mix->file_type == FT_MXFP4_MOE) {
        *type = t->n_dims >= 3 && t->ne[2] > 1 ? QUANT_GGML_MXFP4 : QUANT_GGML_Q8_0;
    } else if (cat == CAT_TOKEN_EMBD) {
        /* the mixes here keep the default type for an untied embedding */
    } else if (is_attn_v(cat)) {
        *type = attn_v_type(s, *type);
    } else if (cat == CAT_ATTN_K) {
        if (s->n_expert == 8) *type = QUANT_GGML_Q8_0;
    } else if (cat == CAT_FFN_DOWN) {
        RETURN_IF_FAILED(layer_of(s, s->i_ffn_down, t->name, &layer, err));
        *type = ffn_down_type(s, layer, *type);
        s->i_ffn_down++;
    } else if (cat == CAT_ATTN_OUTPUT) {
        *type = attn_output_type(s, *type);
    } else if (cat == CAT_ATTN_QKV) {
        *type = qkv_type(s, *type); /* unreachable in llama.cpp too: QKV is attn_v-like */
    } else if (cat == CAT_FFN_GATE) {
        RETURN_IF_FAILED(layer_of(s, s->i_ffn_gate, t->name, &layer, err));
        s->i_ffn_gate++;
    } else if (cat == CAT_FFN_UP) {
        RETURN_IF_FAILED(layer_of(s, s->i_ffn_up, t->name, &layer, err));
        s->i_ffn_up++;
    }
    return QUANT_CK_OK;
}

/* ---- fallbacks for row lengths a type cannot hold (tensor_type_fallback) -------------------- */

static const struct {
    int from, to;
} fallbacks[] = {
    {QUANT_GGML_IQ4_XS, QUANT_GGML_IQ4_NL}, {QUANT_GGML_Q2_K, QUANT_GGML_Q4_0},
    {QUANT_GGML_Q3_K, QUANT_GGML_Q4_0},     {QUANT_GGML_Q4_K, QUANT_GGML_Q5_0},
    {QUANT_GGML_Q5_K, QUANT_GGML_Q5_1},     {QUANT_GGML_Q6_K, QUANT_GGML_Q8_0},
};

static int fallback_type(int type, int64_t ncols)
{
    int64_t blk = block_of(type);
    if (blk > 0 && ncols % blk == 0) return type;
    int to = type; /* a 32-block type has no smaller block: only F16 is left */
    for (size_t i = 0; i < sizeof fallbacks / sizeof fallbacks[0]; i++)
        if (fallbacks[i].from == type) to = fallbacks[i].to;
    blk = block_of(to);
    return blk > 0 && ncols % blk == 0 ? to : QUANT_GGML_F16;
}

/* ---- the choice ---------------------------------------------------------------------------------
 */

/* llama.cpp's weight_name_comparer: the number in "blk.N." (-1 without one), then the name. */
typedef struct sort_key {
    int layer;
    const char *name;
    size_t index;
} sort_key;

static int by_layer_then_name(const void *a, const void *b)
{
    const sort_key *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

static quant_ck_status choose_one(mix_state *s, const quant_gguf_mix_tensor *t,
                                  quant_gguf_choice *c, quant_ck_error *err)
{
    c->type = c->wanted = t->type;
    c->why = QUANT_GGUF_KEPT;
    if (!quant_gguf_quantizable(t->name, t->n_dims)) return QUANT_CK_OK;
    int type = s->mix ? s->mix->default_type : t->type;
    if (t->manual >= 0) {
        if (!quant_ggml_traits_get(t->manual))
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "tensor '%s': ggml type %d cannot be written", t->name, t->manual);
        type = t->manual;
        c->why = QUANT_GGUF_MANUAL;
    }
    if (t->manual < 0 && (!s->mix || !is_quantized(type))) {
        c->type = c->wanted = type; /* no mix, or one that quantizes nothing */
        c->why = s->mix ? QUANT_GGUF_DEFAULT : QUANT_GGUF_KEPT;
        return QUANT_CK_OK;
    }
    if (t->manual < 0) {
        c->why = QUANT_GGUF_DEFAULT;
        RETURN_IF_FAILED(mix_type(s, t, category_of(t->name), &type, err));
        if (type != s->mix->default_type) c->why = QUANT_GGUF_MIX_RULE;
    }
    c->wanted = type;
    c->type = fallback_type(type, t->ne[0]);
    if (c->type != type) c->why = QUANT_GGUF_FALLBACK;
    return QUANT_CK_OK;
}

static void state_init(mix_state *s, const quant_gguf_mix *mix, const quant_gguf_model *m,
                       bool has_importance, const quant_gguf_mix_tensor *tensors, size_t n)
{
    memset(s, 0, sizeof *s);
    s->mix = mix;
    s->m = m;
    s->has_importance = has_importance;
    s->falcon = m->arch && !strcmp(m->arch, "falcon");
    s->n_layer = m->n_layer;
    s->n_expert = m->n_expert > 1 ? m->n_expert : 1;
    s->n_gqa = m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 0;
    s->is_70b =
        m->arch && !strcmp(m->arch, "llama") && m->n_layer == 80 && m->n_head != m->n_head_kv;
    s->tied_embeddings = true;
    for (size_t i = 0; i < n; i++) {
        category c = category_of(tensors[i].name);
        if (is_attn_v(c)) s->n_attention_wv++;
        if (c == CAT_OUTPUT) s->tied_embeddings = false;
    }
}

quant_ck_status quant_gguf_mix_choose(const quant_gguf_mix *mix, const quant_gguf_model *m,
                                      bool has_importance, const quant_gguf_mix_tensor *tensors,
                                      size_t n, quant_gguf_choice *out, quant_ck_error *err)
{
    if (err) err->status = QUANT_CK_OK, err->message[0] = 0;
    if (!m || (n && (!tensors || !out)))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "model, tensors or out is NULL");
    mix_state s;
    state_init(&s, mix, m, has_importance, tensors, n);
    sort_key *order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "cannot allocate the tensor order");
    for (size_t i = 0; i < n; i++) {
        int layer = -1;
        if (sscanf(tensors[i].name, "blk.%d.", &layer) != 1) layer = -1;
        order[i] = (sort_key){layer, tensors[i].name, i};
    }
    qsort(order, n, sizeof *order, by_layer_then_name);
    quant_ck_status st = QUANT_CK_OK;
    for (size_t k = 0; k < n && st == QUANT_CK_OK; k++)
        st = choose_one(&s, &tensors[order[k].index], &out[order[k].index], err);
    free(order);
    return st;
}
