/* decode.c -- llamacpp-decode LIBDIR N PROMPT REFERENCE.gguf SAME.gguf [OTHER.gguf...]: proves
 * that llama.cpp (libllama) loads each model, validating every tensor's data as it does
 * (check_tensors), and that greedy decoding of PROMPT for N tokens gives, from SAME, exactly the
 * tokens it gives from REFERENCE; each OTHER must load and decode (how many of its tokens are the
 * reference's is shown, not judged). Prints the tokens and text of each and a line "ok FILE" or
 * "FAIL FILE: why" per file after the reference; exits 0 when every file passed, else 1.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml_abi.h"

#define MAX_TOKENS 256
#define N_CTX      256

typedef struct run {
    lc_token prompt[MAX_TOKENS];
    int n_prompt;
    lc_token out[MAX_TOKENS];
    int n_out;
} run;

static lc_token argmax(const float *logits, int n)
{
    lc_token best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static void print_run(const lc_api *api, const struct llama_vocab *vocab, const char *path,
                      const run *r)
{
    printf("  %s:", path);
    for (int i = 0; i < r->n_out; i++) printf(" %d", r->out[i]);
    printf("\n    \"");
    for (int i = 0; i < r->n_out; i++) {
        char piece[64];
        int32_t n = api->llama_token_to_piece(vocab, r->out[i], piece, sizeof piece, 0, false);
        if (n > 0) fwrite(piece, 1, (size_t)n, stdout);
    }
    printf("\"\n");
}

/* The defaults of llama.h's v0.5.0 (llama_model_default_params, llama_context_default_params),
 * from fields at the start, the middle and the end of each struct: a library whose layout is not
 * the one restated in ggml_abi.h shows here, before anything runs on misread parameters. */
static const char *layout_mismatch(const lc_model_params *m, const lc_context_params *c)
{
    if (m->n_gpu_layers != -1 || m->kv_overrides || !m->use_extra_bufts || m->no_alloc ||
        m->load_mtp)
        return "llama_model_params";
    if (c->n_ctx != 512 || c->n_batch != 2048 || c->n_ubatch != 512 || c->n_seq_max != 1 ||
        c->yarn_ext_factor != -1.0f || c->defrag_thold != -1.0f || c->type_k != 1 ||
        c->type_v != 1 || !c->offload_kqv || !c->op_offload || !c->swa_full || c->kv_unified ||
        c->samplers || c->n_samplers || c->ctx_other)
        return "llama_context_params";
    return NULL;
}

/* Greedy decoding of `prompt` for `n` tokens with model `path` into `r`. */
static int generate(const lc_api *api, const char *path, const char *prompt, int n, run *r)
{
    lc_model_params mp = api->llama_model_default_params();
    lc_context_params cp = api->llama_context_default_params();
    const char *mismatch = layout_mismatch(&mp, &cp);
    if (mismatch) {
        printf("FAIL %s: libllama.v0.5.0.so's defaults of struct %s are not v0.5.0's (its layout "
               "differs from ggml_abi.h's)\n",
               path, mismatch);
        return -1;
    }
    mp.check_tensors = true; /* llama.cpp validates every block's scales as it loads */
    struct llama_model *model = api->llama_model_load_from_file(path, mp);
    if (!model) {
        printf("FAIL %s: llama_model_load_from_file refuses it\n", path);
        return -1;
    }
    cp.n_ctx = cp.n_batch = cp.n_ubatch = N_CTX;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.no_perf = true;
    struct llama_context *ctx = api->llama_init_from_model(model, cp);
    int rc = -1;
    if (!ctx) {
        printf("FAIL %s: llama_init_from_model fails\n", path);
        goto out;
    }
    const struct llama_vocab *vocab = api->llama_model_get_vocab(model);
    int n_vocab = api->llama_vocab_n_tokens(vocab);
    r->n_prompt = api->llama_tokenize(vocab, prompt, (int32_t)strlen(prompt), r->prompt, MAX_TOKENS,
                                      true, false);
    if (r->n_prompt <= 0 || r->n_prompt + n > N_CTX) {
        printf("FAIL %s: the prompt gives %d tokens\n", path, r->n_prompt);
        goto out;
    }
    lc_batch b = api->llama_batch_get_one(r->prompt, r->n_prompt);
    for (r->n_out = 0; r->n_out < n; r->n_out++) {
        if (api->llama_decode(ctx, b)) {
            printf("FAIL %s: llama_decode fails at token %d\n", path, r->n_out);
            goto out;
        }
        r->out[r->n_out] = argmax(api->llama_get_logits_ith(ctx, -1), n_vocab);
        b = api->llama_batch_get_one(&r->out[r->n_out], 1);
    }
    print_run(api, vocab, path, r);
    rc = 0;
out:
    if (ctx) api->llama_free(ctx);
    api->llama_model_free(model);
    return rc;
}

static bool same_prompt(const run *ref, const run *r)
{
    return r->n_prompt == ref->n_prompt &&
           !memcmp(r->prompt, ref->prompt, sizeof(lc_token) * (size_t)r->n_prompt);
}

/* SAME: every token the reference's. */
static int compare(const char *ref_path, const run *ref, const char *path, const run *r)
{
    if (!same_prompt(ref, r)) {
        printf("FAIL %s: the prompt's tokens differ from %s's\n", path, ref_path);
        return -1;
    }
    for (int i = 0; i < ref->n_out; i++)
        if (r->out[i] != ref->out[i]) {
            printf("FAIL %s: token %d is %d, %s gives %d\n", path, i, r->out[i], ref_path,
                   ref->out[i]);
            return -1;
        }
    printf("ok %s: llama.cpp loads it and decodes the same %d tokens as from %s\n", path,
           ref->n_out, ref_path);
    return 0;
}

/* OTHER: it loaded and decoded; the tokens shared with the reference are only counted. */
static int report(const char *ref_path, const run *ref, const char *path, const run *r)
{
    if (!same_prompt(ref, r)) {
        printf("FAIL %s: the prompt's tokens differ from %s's\n", path, ref_path);
        return -1;
    }
    int same = 0;
    while (same < ref->n_out && r->out[same] == ref->out[same]) same++;
    printf("ok %s: llama.cpp loads it and decodes %d tokens, the first %d as from %s\n", path,
           r->n_out, same, ref_path);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc >= 6 ? atoi(argv[2]) : 0;
    if (argc < 6 || n < 1 || n > MAX_TOKENS / 2) {
        fprintf(stderr,
                "usage: %s LIBDIR N PROMPT REFERENCE.gguf SAME.gguf [OTHER.gguf...] (N in "
                "1..%d)\n",
                argv[0], MAX_TOKENS / 2);
        return 2;
    }
    lc_api api;
    char msg[512];
    if (lc_load(&api, argv[1], true, msg, sizeof msg)) {
        printf("FAIL %s\n", msg);
        return 1;
    }
    printf("llama.cpp's CPU backend: %s\n", api.cpu_variant);
    static run ref, r;
    int failed = 0;
    if (generate(&api, argv[4], argv[3], n, &ref)) {
        failed = 1; /* generate() said why */
    } else {
        for (int i = 5; i < argc; i++) {
            if (generate(&api, argv[i], argv[3], n, &r))
                failed++;
            else if (i == 5)
                failed += compare(argv[4], &ref, argv[i], &r) != 0;
            else
                failed += report(argv[4], &ref, argv[i], &r) != 0;
        }
    }
    lc_unload(&api);
    return failed ? 1 : 0;
}
