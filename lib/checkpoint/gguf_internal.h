/* gguf_internal.h -- the gguf layout's run, shared by its planning (gguf_plan.c: the input, the
 * model's hyper-parameters, each tensor's rule, type and importance), its Hugging Face input
 * (gguf_hf.c: a Llama checkpoint directory read as GGUF tensors) and its writing (gguf_run.c:
 * the one pass to the output GGUF).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_GGUF_INTERNAL_H
#define QUANT_GGUF_INTERNAL_H

#include "ck_internal.h"
#include "quant_gguf.h"
#include "quant_gguf_mix.h"

/* One input tensor as the output names it. */
typedef struct gguf_src {
    const char *name; /* its GGUF name (owned by the reader, or by the job for a checkpoint) */
    int n_dims;
    int64_t ne[4]; /* ggml order */
    int type;      /* the ggml type it has as it comes (F32, F16 or BF16 from safetensors) */
    int64_t nrows;
    uint64_t nbytes; /* the bytes read of it */
    bool raw;        /* its bytes are `type`'s as GGUF stores them: copied when it is kept */
    const quant_gguf_tensor *gt; /* a GGUF input's tensor, or NULL */
    const quant_st_file *sf;     /* a checkpoint's shard and tensor, or NULL */
    const quant_st_tensor *st;
    int64_t heads; /* > 0: rows permuted over this many heads, as llama.cpp's converter does */
} gguf_src;

typedef struct gguf_job {
    const quant_ruleset *rules;
    const quant_pipeline_options *opts;
    const char *in;            /* the input as named in messages */
    quant_gguf_file *f;        /* a GGUF input, or NULL */
    ck_shards shards;          /* a Hugging Face checkpoint's shards (n 0 otherwise) */
    quant_gguf_file *vocab;    /* the checkpoint's vocabulary source, or NULL */
    char **names;              /* a checkpoint's GGUF tensor names (n), owned */
    struct gguf_hf *hf;        /* a checkpoint's hyper-parameters (gguf_hf.c), or NULL */
    gguf_src *src;             /* n */
    const quant_gguf_mix *mix; /* NULL: no mix */
    quant_gguf_model model;
    size_t n;                     /* tensors, in the input's order */
    quant_gguf_mix_tensor *mt;    /* n: name, dims, input type, the rule's type */
    quant_gguf_choice *choice;    /* n: what each tensor becomes */
    long *rule;                   /* n: the first matching rule, -1 for none */
    const quant_importance **imp; /* n: its importance, or NULL */
    long *unused;                 /* rules that are the first match of no tensor */
    size_t n_unused;
    quant_report *report;
} gguf_job;

/* Opens the input (under opts->input_dir_fd, waiting for the whole of a file still arriving),
 * reads the model's hyper-parameters and plans every tensor: its rule (which must name a type
 * GGUF holds, or none), its importance, the type the mix and rules choose. Errors name the file,
 * the tensor and the rule. */
quant_ck_status ck_gguf_plan(gguf_job *j, const quant_ruleset *rules, const char *in,
                             const quant_pipeline_options *opts, quant_ck_error *err);

/* quant_quantize_path() for the gguf layout (a GGUF input). */
quant_ck_status ck_gguf_quantize(const quant_ruleset *rules, const char *in, const char *out,
                                 const quant_pipeline_options *opts, quant_report **report,
                                 quant_ck_error *err);

/* The Hugging Face Llama checkpoint directory j->in (under opts->input_dir_fd) as the job's
 * input: config.json, the shards, opts->gguf_vocab; fills j->src, j->names, j->model. */
quant_ck_status ck_gguf_hf_open(gguf_job *j, quant_ck_error *err);
/* Declares the output's pairs for a checkpoint input: the architecture's from config.json, the
 * tokenizer's copied from the vocabulary source. */
quant_ck_status ck_gguf_hf_kvs(const gguf_job *j, quant_gguf_writer *w, quant_ck_error *err);
/* Frees what ck_gguf_hf_open() made. */
void ck_gguf_hf_free(gguf_job *j);

/* quant_check_path() (plan NULL) and quant_plan_path() for the gguf layout. */
quant_ck_status ck_gguf_check(const quant_ruleset *rules, const char *in,
                              const quant_pipeline_options *opts, quant_plan **plan,
                              quant_ck_error *err);

/* Frees what ck_gguf_plan() made (not the report). */
void ck_gguf_job_free(gguf_job *j);

/* Maps a module path between Hugging Face's Llama naming and GGUF's ("model.layers.0.self_attn.
 * q_proj" <-> "blk.0.attn_q"; to_gguf: HF -> GGUF) into `out`; false when the table has no such
 * name or it does not fit (gguf_names.c). */
bool ck_gguf_map_module(const char *from, bool to_gguf, char *out, size_t cap);

/* The qtype whose traits name ggml type `type`, or -1 (F32, F16, BF16). */
int ck_gguf_qtype_of(int type);

#endif /* QUANT_GGUF_INTERNAL_H */
