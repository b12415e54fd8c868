/* gguf_names.c -- tensor names between Hugging Face's Llama family (LlamaForCausalLM,
 * MistralForCausalLM) and GGUF, as llama.cpp's converter maps them: "model.layers.N.self_attn.
 * q_proj" <-> "blk.N.attn_q", the embedding, the final norm and the head. One table, read both
 * ways; module paths (names without ".weight") are mapped, so statistics posted under one name
 * find a tensor stored under the other.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>

#include "gguf_internal.h"

/* Per-layer parts: HF's "model.layers.N.<hf>" is GGUF's "blk.N.<gguf>". */
static const struct {
    const char *hf, *gguf;
} layer_parts[] = {
    {"input_layernorm", "attn_norm"},    {"self_attn.q_proj", "attn_q"},
    {"self_attn.k_proj", "attn_k"},      {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
    {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
};

/* Whole-model parts. */
static const struct {
    const char *hf, *gguf;
} model_parts[] = {
    {"model.embed_tokens", "token_embd"},
    {"model.norm", "output_norm"},
    {"lm_head", "output"},
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* "PREFIX<digits>.REST": the layer number and REST, or false. */
static bool split_layer(const char *s, const char *prefix, unsigned *layer, const char **rest)
{
    size_t pl = strlen(prefix);
    if (strncmp(s, prefix, pl)) return false;
    const char *p = s + pl;
    unsigned v = 0;
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') {
        if (v > 100000) return false;
        v = v * 10 + (unsigned)(*p++ - '0');
    }
    if (*p != '.') return false;
    *layer = v;
    *rest = p + 1;
    return true;
}

/* Maps module path `from` between the two namings (to_gguf: HF -> GGUF, else GGUF -> HF) into
 * `out` (capacity `cap`); false when it is not a name of the table or does not fit. */
bool ck_gguf_map_module(const char *from, bool to_gguf, char *out, size_t cap)
{
    for (size_t i = 0; i < N_OF(model_parts); i++) {
        const char *a = to_gguf ? model_parts[i].hf : model_parts[i].gguf;
        const char *b = to_gguf ? model_parts[i].gguf : model_parts[i].hf;
        if (!strcmp(from, a)) return (size_t)snprintf(out, cap, "%s", b) < cap;
    }
    unsigned layer;
    const char *rest;
    if (!split_layer(from, to_gguf ? "model.layers." : "blk.", &layer, &rest)) return false;
    for (size_t i = 0; i < N_OF(layer_parts); i++) {
        const char *a = to_gguf ? layer_parts[i].hf : layer_parts[i].gguf;
        const char *b = to_gguf ? layer_parts[i].gguf : layer_parts[i].hf;
        if (!strcmp(rest, a))
            return (size_t)snprintf(out, cap, to_gguf ? "blk.%u.%s" : "model.layers.%u.%s", layer,
                                    b) < cap;
    }
    return false;
}
