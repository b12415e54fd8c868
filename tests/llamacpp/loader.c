/* loader.c -- opens llama.cpp's prebuilt libraries with dlopen() and resolves the entry points
 * of ggml_abi.h from a table, then registers one safe CPU backend variant with ggml.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml_abi.h"

enum { LIB_BASE, LIB_GGML, LIB_LLAMA };

typedef struct symbol {
    int lib;
    const char *name;
    size_t field; /* offsetof(lc_api, the function pointer) */
} symbol;

#define SYM(lib, name)                                                                             \
    {                                                                                              \
        lib, #name, offsetof(lc_api, name)                                                         \
    }

static const symbol symbols[] = {
    SYM(LIB_BASE, gguf_init_from_file),
    SYM(LIB_BASE, gguf_free),
    SYM(LIB_BASE, gguf_get_n_tensors),
    SYM(LIB_BASE, gguf_get_tensor_name),
    SYM(LIB_BASE, gguf_get_tensor_ne),
    SYM(LIB_BASE, gguf_get_tensor_type),
    SYM(LIB_BASE, gguf_get_tensor_size),
    SYM(LIB_BASE, ggml_get_type_traits),
    SYM(LIB_BASE, ggml_get_tensor),
    SYM(LIB_BASE, ggml_get_data),
    SYM(LIB_BASE, ggml_nbytes),
    SYM(LIB_BASE, ggml_free),
    SYM(LIB_BASE, ggml_log_set),
    SYM(LIB_GGML, ggml_backend_load),
    SYM(LIB_LLAMA, llama_backend_init),
    SYM(LIB_LLAMA, llama_backend_free),
    SYM(LIB_LLAMA, llama_log_set),
    SYM(LIB_LLAMA, llama_model_default_params),
    SYM(LIB_LLAMA, llama_context_default_params),
    SYM(LIB_LLAMA, llama_model_load_from_file),
    SYM(LIB_LLAMA, llama_model_free),
    SYM(LIB_LLAMA, llama_init_from_model),
    SYM(LIB_LLAMA, llama_free),
    SYM(LIB_LLAMA, llama_model_get_vocab),
    SYM(LIB_LLAMA, llama_vocab_n_tokens),
    SYM(LIB_LLAMA, llama_tokenize),
    SYM(LIB_LLAMA, llama_token_to_piece),
    SYM(LIB_LLAMA, llama_batch_get_one),
    SYM(LIB_LLAMA, llama_decode),
    SYM(LIB_LLAMA, llama_get_logits_ith),
    SYM(LIB_LLAMA, llama_model_quantize_default_params),
    SYM(LIB_LLAMA, llama_model_quantize),
};

static const char *const lib_files[] = {"libggml-base.so", "libggml.v0.5.0.so",
                                        "libllama.v0.5.0.so"};

/* The CPU variants tried in order: AVX2/FMA/F16C, then the x86-64 baseline. */
static const char *const cpu_variants[] = {"libggml-cpu-haswell.so", "libggml-cpu-x64.so"};

static void log_errors(int level, const char *text, void *user)
{
    (void)user;
    if (level == LC_LOG_ERROR || getenv("LLAMACPP_VERBOSE")) fputs(text, stderr);
}

static void *open_lib(const char *dir, const char *file, char *msg, size_t msg_len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) snprintf(msg, msg_len, "dlopen %s: %s", path, dlerror());
    return h;
}

static int register_cpu(lc_api *api, const char *dir, char *msg, size_t msg_len)
{
    for (size_t i = 0; i < sizeof cpu_variants / sizeof cpu_variants[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, cpu_variants[i]);
        if (api->ggml_backend_load(path)) {
            api->cpu_variant = cpu_variants[i];
            return 0;
        }
    }
    snprintf(msg, msg_len, "%s: ggml loads neither %s nor %s on this machine", dir, cpu_variants[0],
             cpu_variants[1]);
    return -1;
}

int lc_load(lc_api *api, const char *dir, bool llama, char *msg, size_t msg_len)
{
    memset(api, 0, sizeof *api);
    void **handles[] = {&api->base, &api->ggml, &api->llama};
    int n_libs = llama ? 3 : 1;
    for (int i = 0; i < n_libs; i++)
        if (!(*handles[i] = open_lib(dir, lib_files[i], msg, msg_len))) goto fail;
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        const symbol *s = &symbols[i];
        if (s->lib >= n_libs) continue;
        void *p = dlsym(*handles[s->lib], s->name);
        if (!p) {
            snprintf(msg, msg_len, "%s/%s: no symbol %s", dir, lib_files[s->lib], s->name);
            goto fail;
        }
        memcpy((char *)api + s->field, &p, sizeof p); /* POSIX: a function's address */
    }
    api->ggml_log_set(log_errors, NULL);
    if (!llama) return 0;
    api->llama_log_set(log_errors, NULL);
    if (register_cpu(api, dir, msg, msg_len)) goto fail;
    api->llama_backend_init();
    return 0;
fail:
    lc_unload(api);
    return -1;
}

void lc_unload(lc_api *api)
{
    if (api->llama && api->llama_backend_free) api->llama_backend_free();
    void *handles[] = {api->llama, api->ggml, api->base};
    for (int i = 0; i < 3; i++)
        if (handles[i]) dlclose(handles[i]);
    memset(api, 0, sizeof *api);
}
