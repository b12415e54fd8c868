/* gguf_plan.c -- planning a gguf-layout run over a GGUF input: the input opened (confined and
 * waited for as every input), the model's hyper-parameters as llama-quantize reads them, each
 * tensor's first matching rule (which must name a type GGUF holds; rule fields that have no
 * meaning for ggml's block types are refused), its importance (statistics named after the GGUF
 * module path or the Hugging Face one), and the type the mix and the rules give it.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "gguf_internal.h"

#define MODULE_MAX 256

int ck_gguf_qtype_of(int type)
{
    for (int q = 0; q < QUANT_QTYPE_COUNT; q++)
        if (quant_qtype_traits_get((quant_qtype)q)->ggml_type == type) return q;
    return -1;
}

/* ---- the input and the model ---------------------------------------------------------------- */

/* A GGUF input's tensors as the run's sources: everything as the file has it. */
static quant_ck_status gguf_sources(gguf_job *j, quant_ck_error *err)
{
    j->n = j->f->n_tensors;
    j->src = calloc(j->n ? j->n : 1, sizeof *j->src);
    if (!j->src) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < j->n; i++) {
        const quant_gguf_tensor *t = &j->f->tensors[i];
        gguf_src *s = &j->src[i];
        *s = (gguf_src){.name = t->name,
                        .n_dims = t->n_dims,
                        .type = t->type,
                        .nrows = t->nrows,
                        .nbytes = t->nbytes,
                        .raw = true,
                        .gt = t};
        memcpy(s->ne, t->ne, sizeof s->ne);
    }
    return QUANT_CK_OK;
}

/* The input: a GGUF file (by its magic), or a Hugging Face checkpoint directory. Opened under
 * opts->input_dir_fd, after a file still arriving is there whole. */
static quant_ck_status open_input(gguf_job *j, const char *in, quant_ck_error *err)
{
    const quant_pipeline_options *o = j->opts;
    ck_wait w = {o->input_wait, o->input_wait_user, o->cancel};
    quant_ck_status st = ck_wait_input(&w, ck_basename(in), QUANT_INPUT_WHOLE, NULL, err);
    if (st != QUANT_CK_OK) {
        if (st != QUANT_CK_ERR_CANCELLED) quant_ck_prefix(err, "%s", in);
        return st;
    }
    ck_dir d = {.fd = o->input_dir_fd, .nofollow = o->no_symlinks};
    int fd = -1;
    struct stat sb;
    st = ck_open_in(&d, in, CK_KIND_ANY, &fd, &sb, err);
    if (st != QUANT_CK_OK) return st;
    if (S_ISDIR(sb.st_mode)) {
        close(fd); /* the shards' reader opens it again, with its files */
        return ck_gguf_hf_open(j, err);
    }
    unsigned char magic[4] = {0};
    if (pread(fd, magic, 4, 0) != 4 || !quant_gguf_is_gguf(magic, 4)) {
        close(fd);
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: the gguf layout takes a GGUF file or a Hugging Face Llama "
                             "checkpoint directory (config.json and *.safetensors), and this is "
                             "neither",
                             in);
    }
    st = quant_gguf_open_fd(fd, in, &j->f, err);
    if (st == QUANT_CK_OK) st = gguf_sources(j, err);
    return st;
}

/* ARCH.KEY as a u32 (a per-layer array gives layer 0's), or `dflt` when absent. */
static quant_ck_status arch_u32(const gguf_job *j, const char *key, bool required, int64_t dflt,
                                int64_t *out, quant_ck_error *err)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", j->model.arch, key);
    *out = dflt;
    if (!quant_gguf_find_kv(j->f, full)) {
        if (!required) return QUANT_CK_OK;
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: key '%s' is missing (llama.cpp needs it to load the model)",
                             j->in, full);
    }
    uint32_t v;
    quant_ck_status st = quant_gguf_get_u32_layer(j->f, full, 0, &v, err);
    if (st == QUANT_CK_OK) *out = v;
    return st;
}

static quant_ck_status read_model(gguf_job *j, quant_ck_error *err)
{
    if (!quant_gguf_find_kv(j->f, "general.architecture")) {
        const char *type = NULL;
        quant_ck_error ignore;
        bool imatrix = quant_gguf_get_string(j->f, "general.type", &type, &ignore) == QUANT_CK_OK &&
                       !strcmp(type, "imatrix");
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: no general.architecture: %s", j->in,
                             imatrix ? "an importance matrix, not a model (pass it as the "
                                       "importance, and the model as the input)"
                                     : "not a model llama.cpp can load");
    }
    quant_ck_status st = quant_gguf_get_string(j->f, "general.architecture", &j->model.arch, err);
    if (st == QUANT_CK_OK) st = arch_u32(j, "block_count", true, 0, &j->model.n_layer, err);
    if (st == QUANT_CK_OK)
        st = arch_u32(j, "attention.head_count", false, 0, &j->model.n_head, err);
    if (st == QUANT_CK_OK)
        st = arch_u32(j, "attention.head_count_kv", false, j->model.n_head, &j->model.n_head_kv,
                      err);
    if (st == QUANT_CK_OK) st = arch_u32(j, "expert_count", false, 0, &j->model.n_expert, err);
    return st;
}

/* ---- rules ------------------------------------------------------------------------------------
 */

/* The nearest type GGUF holds for a qtype it does not (a plan's refusal suggests it). */
static const struct {
    quant_qtype from;
    const char *to;
} nearest[] = {
    {QUANT_QTYPE_INT2, "q2_k"},         {QUANT_QTYPE_INT3, "q3_k"},
    {QUANT_QTYPE_INT4, "q4_0 or q4_k"}, {QUANT_QTYPE_UINT4, "q4_1 or q4_k"},
    {QUANT_QTYPE_INT5, "q5_0 or q5_k"}, {QUANT_QTYPE_INT6, "q6_k"},
    {QUANT_QTYPE_INT7, "q8_0"},         {QUANT_QTYPE_INT8, "q8_0"},
    {QUANT_QTYPE_UINT8, "q8_0"},        {QUANT_QTYPE_INT16, "q8_0 (or keep F16)"},
    {QUANT_QTYPE_NF4, "iq4_nl"},        {QUANT_QTYPE_FP8_E4M3FN, "q8_0"},
    {QUANT_QTYPE_FP8_E5M2, "q8_0"},     {QUANT_QTYPE_MXFP8, "q8_0"},
    {QUANT_QTYPE_MXFP8_16, "q8_0"},     {QUANT_QTYPE_NVFP4, "mxfp4"},
};

static const char *nearest_of(quant_qtype q)
{
    for (size_t i = 0; i < sizeof nearest / sizeof nearest[0]; i++)
        if (nearest[i].from == q) return nearest[i].to;
    return "q8_0";
}

/* A rule's fields that mean nothing for ggml's block types: refused rather than ignored. */
static const char *rule_misfit(const quant_rule *r)
{
    /* tile_size: the parser allows a block type's own block only (its fixed tile) */
    const char *c = r->weight_calibration;
    if (c && strcmp(c, "absmax") && strncmp(c, "mse", 3) && strncmp(c, "minmax_mse", 10))
        return "weight_calibration other than absmax or an mse search (each block type searches "
               "its own scales, weighted by the importance when there is one)";
    if (r->has_act_qtype || r->act_static_scale)
        return "act_qtype / act_static_scale (llama.cpp quantizes activations itself)";
    if (r->scale_dtype != QUANT_DTYPE_F32) return "scale_dtype (ggml's blocks fix their scales)";
    if (r->stochastic_rounding) return "stochastic_rounding";
    return NULL;
}

/* The type rule `ri` asks of a tensor: a ggml type, or the tensor's own (no weight_qtype). */
static quant_ck_status rule_type(const gguf_job *j, long ri, const gguf_src *t, int *manual,
                                 quant_ck_error *err)
{
    const quant_rule *r = quant_ruleset_rule(j->rules, (size_t)ri);
    const char *misfit = rule_misfit(r);
    if (misfit)
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "rule %ld (matching tensor '%s'): the gguf layout has no %s", ri,
                             t->name, misfit);
    if (!r->has_weight_qtype) {
        *manual = t->type;
        return QUANT_CK_OK;
    }
    const quant_qtype_traits *q = quant_qtype_traits_get(r->weight_qtype);
    if (!q->ggml_type)
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "rule %ld (matching tensor '%s'): GGUF cannot hold %s; the nearest "
                             "GGUF type is %s",
                             ri, t->name, q->name, nearest_of(r->weight_qtype));
    *manual = q->ggml_type;
    return QUANT_CK_OK;
}

/* ---- importance --------------------------------------------------------------------------------
 */

/* The importance entry of tensor `t`: module path as GGUF names it or as Hugging Face does,
 * with one weight per value of a row. Several: an error (which one would be meant?). */
static quant_ck_status importance_of(const gguf_job *j, const gguf_src *t, const char *module,
                                     const quant_importance **out, quant_ck_error *err)
{
    const quant_pipeline_options *o = j->opts;
    *out = NULL;
    char hf[MODULE_MAX];
    bool has_hf = ck_gguf_map_module(module, false, hf, sizeof hf);
    for (size_t i = 0; o->importance_given && i < o->n_importance; i++) {
        const quant_importance *e = &o->importance[i];
        if (strcmp(e->module_path, module) && !(has_hf && !strcmp(e->module_path, hf))) continue;
        if (e->n != t->ne[0]) continue;
        if (*out)
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "tensor '%s': two importance entries fit it ('%s' and '%s')",
                                 t->name, (*out)->act, e->act);
        *out = e;
    }
    return QUANT_CK_OK;
}

/* ---- planning -----------------------------------------------------------------------------------
 */

static quant_ck_status plan_tensor(gguf_job *j, quant_rule_matcher *m, bool *first_of, size_t i,
                                   quant_ck_error *err)
{
    const gguf_src *t = &j->src[i];
    char module[MODULE_MAX];
    if (!quant_module_path(t->name, module, sizeof module)) module[0] = 0;
    quant_ck_status st = quant_rule_matcher_find(m, module, &j->rule[i], err);
    if (st != QUANT_CK_OK) return st;
    quant_gguf_mix_tensor *mt = &j->mt[i];
    *mt = (quant_gguf_mix_tensor){
        .name = t->name, .n_dims = t->n_dims, .type = t->type, .manual = -1};
    for (int d = 0; d < 4; d++) mt->ne[d] = t->ne[d];
    if (j->rule[i] >= 0) {
        first_of[j->rule[i]] = true;
        st = rule_type(j, j->rule[i], t, &mt->manual, err);
    }
    if (st == QUANT_CK_OK) st = importance_of(j, t, module, &j->imp[i], err);
    if (st == QUANT_CK_OK && j->rule[i] >= 0 && !j->imp[i] &&
        quant_ruleset_rule(j->rules, (size_t)j->rule[i])->weight_importance &&
        quant_gguf_quantizable(t->name, t->n_dims))
        st = quant_ck_fail(err, QUANT_CK_ERR_ARG,
                           "tensor '%s': rule %ld asks for weight_importance, and no importance "
                           "statistics of module '%s' (or its Hugging Face name) with %lld "
                           "values were given",
                           t->name, j->rule[i], module, (long long)t->ne[0]);
    return st;
}

static quant_ck_status plan_tensors(gguf_job *j, quant_ck_error *err)
{
    size_t nr = quant_ruleset_count(j->rules);
    bool *first_of = calloc(nr ? nr : 1, sizeof *first_of);
    quant_rule_matcher *m = quant_rule_matcher_new(j->rules);
    quant_ck_status st =
        first_of && m ? QUANT_CK_OK : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == QUANT_CK_OK && i < j->n; i++) st = plan_tensor(j, m, first_of, i, err);
    if (st == QUANT_CK_OK) {
        j->unused = malloc((nr ? nr : 1) * sizeof *j->unused);
        if (!j->unused) st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        for (size_t r = 0; j->unused && r < nr; r++)
            if (!first_of[r]) j->unused[j->n_unused++] = (long)r;
    }
    quant_rule_matcher_free(m);
    free(first_of);
    return st;
}

static quant_ck_status find_mix(gguf_job *j, quant_ck_error *err)
{
    const char *name = j->opts->gguf_mix ? j->opts->gguf_mix : quant_ruleset_gguf_mix(j->rules);
    if (!name) return QUANT_CK_OK;
    j->mix = quant_gguf_mix_find(name);
    if (!j->mix)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "unknown mix \"%.64s\" (llama-quantize's names: Q8_0, Q6_K, Q5_K_M, "
                             "Q5_K_S, Q4_K_M, Q4_K_S, Q3_K_L, Q3_K_M, Q3_K_S, Q2_K, IQ4_NL, "
                             "IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4_MOE, F16, BF16, F32)",
                             name);
    return QUANT_CK_OK;
}

/* A run whose output would be its input (no tensor changes type) is refused unless allowed, as
 * in the other layouts: it is almost always a rule that matches nothing. */
static quant_ck_status check_changes(const gguf_job *j, quant_ck_error *err)
{
    if (j->opts->allow_nothing_quantized || quant_ruleset_allow_nothing_quantized(j->rules))
        return QUANT_CK_OK;
    for (size_t i = 0; i < j->n; i++)
        if (j->choice[i].type != j->src[i].type || j->src[i].heads || !j->src[i].raw)
            return QUANT_CK_OK;
    return quant_ck_fail(err, QUANT_CK_ERR_RULES,
                         "nothing to quantize: no mix, and no rule names a tensor llama.cpp "
                         "quantizes (rules match GGUF module paths whole, e.g. "
                         "'blk\\.0\\.attn_q' or '.*attn_q'); give --mix, or allow it with "
                         "allow_nothing_quantized");
}

quant_ck_status ck_gguf_plan(gguf_job *j, const quant_ruleset *rules, const char *in,
                             const quant_pipeline_options *opts, quant_ck_error *err)
{
    memset(j, 0, sizeof *j);
    j->rules = rules;
    j->opts = opts;
    j->in = in;
    quant_ck_status st = find_mix(j, err);
    if (st == QUANT_CK_OK) st = open_input(j, in, err);
    if (st == QUANT_CK_OK && j->f) st = read_model(j, err);
    if (st != QUANT_CK_OK) return st;
    size_t n = j->n ? j->n : 1;
    j->mt = calloc(n, sizeof *j->mt);
    j->choice = calloc(n, sizeof *j->choice);
    j->rule = calloc(n, sizeof *j->rule);
    j->imp = calloc(n, sizeof *j->imp);
    if (!j->mt || !j->choice || !j->rule || !j->imp)
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    st = plan_tensors(j, err);
    bool has_importance = false;
    for (size_t i = 0; i < j->n; i++) has_importance |= j->imp[i] != NULL;
    if (st == QUANT_CK_OK)
        st = quant_gguf_mix_choose(j->mix, &j->model, has_importance, j->mt, j->n, j->choice, err);
    if (st == QUANT_CK_OK) st = check_changes(j, err);
    if (st != QUANT_CK_OK && st != QUANT_CK_ERR_NOMEM) quant_ck_prefix(err, "%s", in);
    return st;
}

void ck_gguf_job_free(gguf_job *j)
{
    quant_gguf_close(j->f);
    ck_gguf_hf_free(j);
    free(j->src);
    free(j->mt);
    free(j->choice);
    free(j->rule);
    free(j->imp);
    free(j->unused);
    memset(j, 0, sizeof *j);
}
