/* quantize.c -- llamacpp-quantize LIBDIR IN.gguf OUT.gguf MIX|TYPE [IMATRIX.gguf]: llama.cpp's
 * own quantizer (llama_model_quantize in libllama, what the llama-quantize tool calls) turns IN
 * into OUT with the mix MIX (Q8_0, Q4_K_M, ...), or with every tensor it quantizes of ggml type
 * TYPE (q4_k, mxfp4, ...: llama-quantize --pure with a mix whose default type it is), on two
 * threads, for the lane to compare with quant's output of the same mix or of a rule forcing TYPE.
 * With IMATRIX (llama.cpp's GGUF imatrix format), its values are handed over as the
 * llama-quantize tool computes them: in_sum2 / counts per column, 1 where the count is 0.
 * Exits 0 when llama.cpp wrote OUT, 1 otherwise.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml_abi.h"
#include "imatrix_read.h"

#define GGML_TYPE_COUNT 43 /* "none given" for the output and token embedding types */

/* llama.h's enum llama_ftype: the mixes quant knows, then each type with the mix that has it as
 * its default type (pure: every tensor quantized gets it). */
static const struct mix {
    const char *name;
    int ftype;
    bool pure;
} mixes[] = {
    {"Q4_0", 2, false},    {"Q4_1", 3, false},    {"Q8_0", 7, false},    {"Q5_0", 8, false},
    {"Q5_1", 9, false},    {"Q2_K", 10, false},   {"Q3_K_S", 11, false}, {"Q3_K_M", 12, false},
    {"Q3_K_L", 13, false}, {"Q4_K_S", 14, false}, {"Q4_K_M", 15, false}, {"Q5_K_S", 16, false},
    {"Q5_K_M", 17, false}, {"Q6_K", 18, false},   {"IQ4_NL", 25, false}, {"IQ4_XS", 30, false},
    {"q4_0", 2, true},     {"q4_1", 3, true},     {"q8_0", 7, true},     {"q5_0", 8, true},
    {"q5_1", 9, true},     {"q2_k", 10, true},    {"q3_k", 11, true},    {"q4_k", 14, true},
    {"q5_k", 16, true},    {"q6_k", 18, true},    {"iq4_nl", 25, true},  {"iq4_xs", 30, true},
    {"mxfp4", 38, true},
};

static const struct mix *mix_of(const char *name)
{
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++)
        if (!strcmp(mixes[i].name, name)) return &mixes[i];
    return NULL;
}

/* The defaults of v0.5.0's llama_model_quantize_default_params, fields from the start to the
 * end: another layout shows here. */
static bool layout_ok(const lc_quantize_params *p)
{
    return p->nthread == 0 && p->ftype == 7 && p->output_tensor_type == GGML_TYPE_COUNT &&
           p->token_embedding_type == GGML_TYPE_COUNT && !p->allow_requantize &&
           p->quantize_output_tensor && !p->only_copy && !p->pure && !p->keep_split &&
           !p->dry_run && !p->imatrix && !p->kv_overrides && !p->tt_overrides && !p->prune_layers &&
           p->max_buf_size > 0;
}

int main(int argc, char **argv)
{
    const struct mix *mix = argc == 5 || argc == 6 ? mix_of(argv[4]) : NULL;
    if (!mix) {
        fprintf(stderr,
                "usage: %s LIBDIR IN.gguf OUT.gguf MIX|TYPE [IMATRIX.gguf] (Q4_K_M, ..., q4_k, "
                "...)\n",
                argv[0]);
        return 2;
    }
    lc_imatrix_data *imatrix = NULL;
    char msg[512];
    if (argc == 6 && lc_imatrix_read(argv[5], &imatrix, msg, sizeof msg)) {
        printf("FAIL %s\n", msg);
        lc_imatrix_free(imatrix);
        return 1;
    }
    lc_api api;
    if (lc_load(&api, argv[1], true, msg, sizeof msg)) {
        printf("FAIL %s\n", msg);
        lc_imatrix_free(imatrix);
        return 1;
    }
    lc_quantize_params p = api.llama_model_quantize_default_params();
    int rc = 1;
    if (!layout_ok(&p)) {
        printf("FAIL %s: libllama.v0.5.0.so's defaults of struct llama_model_quantize_params "
               "are not v0.5.0's (its layout differs from ggml_abi.h's)\n",
               argv[2]);
    } else {
        p.nthread = 2;
        p.ftype = mix->ftype;
        p.pure = mix->pure;
        p.imatrix = imatrix;
        rc = api.llama_model_quantize(argv[2], argv[3], &p) != 0;
        if (rc)
            printf("FAIL %s: llama_model_quantize to %s as %s fails\n", argv[2], argv[3], argv[4]);
    }
    lc_unload(&api);
    lc_imatrix_free(imatrix);
    return rc;
}
