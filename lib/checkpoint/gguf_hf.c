/* gguf_hf.c -- a Hugging Face Llama checkpoint directory (LlamaForCausalLM, MistralForCausalLM:
 * config.json and *.safetensors, sharded or not) as the gguf layout's input, as llama.cpp's
 * converter reads it: tensor names mapped to GGUF's, shapes reversed into ggml's order, q_proj
 * and k_proj rows put in llama.cpp's rotary order, norms and other 1-D tensors as F32; the
 * architecture's pairs from config.json with the types llama.cpp reads; the tokenizer's pairs
 * copied from a GGUF vocabulary source, without which llama.cpp cannot run the model.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_internal.h"

typedef struct gguf_hf {
    int64_t hidden, inter, layers, heads, heads_kv, vocab, ctx;
    double eps, theta;
} gguf_hf;

static const char *const llama_family[] = {"LlamaForCausalLM", "MistralForCausalLM"};

static quant_ck_status nomem(quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

/* ---- config.json --------------------------------------------------------------------------- */

/* config[key] as a positive integer (or `dflt` when absent and dflt > 0). */
static quant_ck_status cfg_int(const gguf_job *j, json_t *cfg, const char *key, int64_t dflt,
                               int64_t *out, quant_ck_error *err)
{
    json_t *v = json_object_get(cfg, key);
    if (!v && dflt > 0) {
        *out = dflt;
        return QUANT_CK_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 30))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s/config.json: \"%s\" must be a positive integer (llama.cpp needs "
                             "it)",
                             j->in, key);
    *out = json_integer_value(v);
    return QUANT_CK_OK;
}

static quant_ck_status cfg_real(const gguf_job *j, json_t *cfg, const char *key, double dflt,
                                double *out, quant_ck_error *err)
{
    json_t *v = json_object_get(cfg, key);
    if (!v && dflt > 0) {
        *out = dflt;
        return QUANT_CK_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s/config.json: \"%s\" must be a positive number", j->in, key);
    *out = json_number_value(v);
    return QUANT_CK_OK;
}

/* The architecture must be of the Llama family, without a rope scaling llama.cpp would need
 * extra tensors for. */
static quant_ck_status check_arch(const gguf_job *j, json_t *cfg, quant_ck_error *err)
{
    json_t *a = json_array_get(json_object_get(cfg, "architectures"), 0);
    const char *arch = json_is_string(a) ? json_string_value(a) : "(none)";
    bool ok = false;
    for (size_t i = 0; i < sizeof llama_family / sizeof llama_family[0]; i++)
        ok |= !strcmp(arch, llama_family[i]);
    if (!ok)
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "%s/config.json: architecture %.64s: quantd writes GGUF from the "
                             "Llama family (LlamaForCausalLM, MistralForCausalLM); convert other "
                             "models with llama.cpp's convert_hf_to_gguf.py and give quantd that "
                             "GGUF file",
                             j->in, arch);
    json_t *rs = json_object_get(cfg, "rope_scaling");
    if (rs && !json_is_null(rs))
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "%s/config.json: rope_scaling is set: quantd does not write the "
                             "rope frequency tensors it needs; convert with llama.cpp's "
                             "convert_hf_to_gguf.py and give quantd that GGUF file",
                             j->in);
    return QUANT_CK_OK;
}

static quant_ck_status read_config(gguf_job *j, gguf_hf *h, quant_ck_error *err)
{
    char *text = NULL;
    quant_ck_status st =
        ck_read_small_in(&j->shards.dir, "config.json", CK_CONFIG_MAX, &text, NULL, err);
    if (st != QUANT_CK_OK) return st;
    json_error_t je;
    json_t *cfg = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s/config.json: not a JSON object (%s)",
                             j->in, je.text);
    }
    st = check_arch(j, cfg, err);
    if (st == QUANT_CK_OK) st = cfg_int(j, cfg, "hidden_size", 0, &h->hidden, err);
    if (st == QUANT_CK_OK) st = cfg_int(j, cfg, "intermediate_size", 0, &h->inter, err);
    if (st == QUANT_CK_OK) st = cfg_int(j, cfg, "num_hidden_layers", 0, &h->layers, err);
    if (st == QUANT_CK_OK) st = cfg_int(j, cfg, "num_attention_heads", 0, &h->heads, err);
    if (st == QUANT_CK_OK) st = cfg_int(j, cfg, "num_key_value_heads", h->heads, &h->heads_kv, err);
    if (st == QUANT_CK_OK) st = cfg_int(j, cfg, "vocab_size", 0, &h->vocab, err);
    if (st == QUANT_CK_OK) st = cfg_int(j, cfg, "max_position_embeddings", 4096, &h->ctx, err);
    if (st == QUANT_CK_OK) st = cfg_real(j, cfg, "rms_norm_eps", 1e-5, &h->eps, err);
    if (st == QUANT_CK_OK) st = cfg_real(j, cfg, "rope_theta", 10000.0, &h->theta, err);
    if (st == QUANT_CK_OK && (h->hidden % h->heads || h->heads % h->heads_kv))
        st =
            quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                          "%s/config.json: hidden_size %lld, num_attention_heads %lld and "
                          "num_key_value_heads %lld do not divide",
                          j->in, (long long)h->hidden, (long long)h->heads, (long long)h->heads_kv);
    json_decref(cfg);
    return st;
}

/* ---- the vocabulary source ------------------------------------------------------------------ */

static quant_ck_status open_vocab(gguf_job *j, const gguf_hf *h, quant_ck_error *err)
{
    if (!j->opts->gguf_vocab)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: a Hugging Face checkpoint needs a vocabulary source: llama.cpp "
                             "cannot run a model without its tokenizer; give a GGUF file of the "
                             "same model's vocabulary (e.g. llama.cpp's converter's F16 file): "
                             "quant quantize --vocab-from FILE.gguf",
                             j->in);
    quant_ck_status st = quant_gguf_open(j->opts->gguf_vocab, &j->vocab, err);
    if (st != QUANT_CK_OK) return st;
    const quant_gguf_kv *tokens = NULL;
    if (!quant_gguf_find_kv(j->vocab, "tokenizer.ggml.model") ||
        quant_gguf_get_array(j->vocab, "tokenizer.ggml.tokens", QUANT_GGUF_STRING, &tokens, err) !=
            QUANT_CK_OK)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: no tokenizer (tokenizer.ggml.model and tokenizer.ggml.tokens): "
                             "not a vocabulary source",
                             j->opts->gguf_vocab);
    if ((int64_t)tokens->n != h->vocab)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: its tokenizer has %llu tokens, and %s/config.json's vocab_size "
                             "is %lld: not this model's vocabulary",
                             j->opts->gguf_vocab, (unsigned long long)tokens->n, j->in,
                             (long long)h->vocab);
    return QUANT_CK_OK;
}

/* ---- tensors --------------------------------------------------------------------------------- */

static int ggml_of_dtype(quant_st_dtype d)
{
    return d == QUANT_ST_F32    ? QUANT_GGML_F32
           : d == QUANT_ST_F16  ? QUANT_GGML_F16
           : d == QUANT_ST_BF16 ? QUANT_GGML_BF16
                                : -1;
}

/* Names that hold nothing a GGUF needs (the converter drops them too). */
static bool skipped(const char *name)
{
    return strstr(name, "rotary_emb.inv_freq") != NULL;
}

/* One checkpoint tensor as a source: its GGUF name, dims, type, and the permutation of q/k. */
static quant_ck_status add_source(gguf_job *j, const gguf_hf *h, const quant_st_file *sf,
                                  const quant_st_tensor *t, quant_ck_error *err)
{
    char module[256], mapped[256];
    const char *last = strrchr(t->name, '.');
    if (!last || !quant_module_path(t->name, module, sizeof module) ||
        !ck_gguf_map_module(module, true, mapped, sizeof mapped))
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "%s: tensor '%.80s' is not one of a Llama's (embed_tokens, layers.N."
                             "self_attn/mlp/..., norm, lm_head)",
                             sf->path, t->name);
    int type = ggml_of_dtype(t->dtype);
    if (type < 0 || t->rank < 1 || t->rank > 4)
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "%s: tensor '%.80s': %s of rank %d: the gguf layout reads F32, F16 "
                             "and BF16 tensors of rank 1 to 4",
                             sf->path, t->name, quant_st_dtype_name(t->dtype), t->rank);
    char name[QUANT_GGUF_MAX_NAME];
    if ((size_t)snprintf(name, sizeof name, "%s%s", mapped, last) >= sizeof name)
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "%s: tensor '%.80s': its GGUF name %s%s is %d bytes or more", sf->path,
                             t->name, mapped, last, QUANT_GGUF_MAX_NAME);
    size_t i = j->n;
    if (!(j->names[i] = strdup(name))) return nomem(err);
    j->n++;
    gguf_src *s = &j->src[i];
    *s = (gguf_src){.name = j->names[i], .n_dims = t->rank, .sf = sf, .st = t};
    for (int d = 0; d < 4; d++) s->ne[d] = d < t->rank ? t->shape[t->rank - 1 - d] : 1;
    s->nrows = s->ne[1] * s->ne[2] * s->ne[3];
    s->nbytes = quant_st_nbytes(t);
    bool norm = t->rank == 1 || strstr(s->name, "_norm.weight");
    s->type = norm ? QUANT_GGML_F32 : type; /* the converter's rule: norms as F32 */
    s->raw = s->type == type;
    if (strstr(s->name, ".attn_q.")) s->heads = h->heads;
    if (strstr(s->name, ".attn_k.")) s->heads = h->heads_kv;
    if (s->heads && (s->ne[1] % s->heads || (s->ne[1] / s->heads) % 2))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: tensor '%s': %lld rows do not split into %lld heads of an even "
                             "size",
                             sf->path, t->name, (long long)s->ne[1], (long long)s->heads);
    return QUANT_CK_OK;
}

static quant_ck_status add_sources(gguf_job *j, const gguf_hf *h, quant_ck_error *err)
{
    size_t total = 0;
    for (size_t s = 0; s < j->shards.n; s++) total += j->shards.f[s]->n_tensors;
    j->src = calloc(total ? total : 1, sizeof *j->src);
    j->names = calloc(total ? total : 1, sizeof *j->names);
    if (!j->src || !j->names) return nomem(err);
    for (size_t s = 0; s < j->shards.n; s++) {
        const quant_st_file *f = j->shards.f[s];
        for (size_t i = 0; i < f->n_tensors; i++) {
            if (skipped(f->tensors[i].name)) continue;
            quant_ck_status st = add_source(j, h, f, &f->tensors[i], err);
            if (st != QUANT_CK_OK) return st;
        }
    }
    return QUANT_CK_OK;
}

quant_ck_status ck_gguf_hf_open(gguf_job *j, quant_ck_error *err)
{
    const quant_pipeline_options *o = j->opts;
    ck_dir base = {.fd = o->input_dir_fd, .nofollow = o->no_symlinks};
    if (!(j->hf = calloc(1, sizeof *j->hf))) return nomem(err);
    quant_ck_status st = ck_shards_open(&base, j->in, &j->shards, err);
    if (st == QUANT_CK_OK) st = read_config(j, j->hf, err);
    if (st == QUANT_CK_OK) st = open_vocab(j, j->hf, err);
    if (st == QUANT_CK_OK) st = add_sources(j, j->hf, err);
    if (st == QUANT_CK_OK)
        j->model = (quant_gguf_model){.arch = "llama",
                                      .n_layer = j->hf->layers,
                                      .n_head = j->hf->heads,
                                      .n_head_kv = j->hf->heads_kv};
    return st;
}

/* ---- the output's pairs ------------------------------------------------------------------- */

quant_ck_status ck_gguf_hf_kvs(const gguf_job *j, quant_gguf_writer *w, quant_ck_error *err)
{
    const gguf_hf *h = j->hf;
    const struct {
        const char *key;
        int64_t v;
    } u32s[] = {
        {"llama.context_length", h->ctx},
        {"llama.embedding_length", h->hidden},
        {"llama.block_count", h->layers},
        {"llama.feed_forward_length", h->inter},
        {"llama.attention.head_count", h->heads},
        {"llama.attention.head_count_kv", h->heads_kv},
        {"llama.rope.dimension_count", h->hidden / h->heads},
        {"llama.vocab_size", h->vocab},
    };
    quant_ck_status st = quant_gguf_writer_set_string(w, "general.architecture", "llama", err);
    if (st == QUANT_CK_OK)
        st = quant_gguf_writer_set_string(w, "general.name", ck_basename(j->in), err);
    for (size_t i = 0; st == QUANT_CK_OK && i < sizeof u32s / sizeof u32s[0]; i++)
        st = quant_gguf_writer_set_u32(w, u32s[i].key, (uint32_t)u32s[i].v, err);
    if (st == QUANT_CK_OK)
        st = quant_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", (float)h->eps,
                                       err);
    if (st == QUANT_CK_OK)
        st = quant_gguf_writer_set_f32(w, "llama.rope.freq_base", (float)h->theta, err);
    for (size_t i = 0; st == QUANT_CK_OK && i < j->vocab->n_kv; i++)
        if (!strncmp(j->vocab->kv[i].key, "tokenizer.", 10))
            st = quant_gguf_writer_copy_kv(w, &j->vocab->kv[i], err);
    return st;
}

void ck_gguf_hf_free(gguf_job *j)
{
    ck_shards_close(&j->shards);
    quant_gguf_close(j->vocab);
    for (size_t i = 0; j->names && i < j->n; i++) free(j->names[i]);
    free(j->names);
    free(j->hf);
}
