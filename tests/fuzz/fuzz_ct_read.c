/* fuzz_ct_read.c -- libFuzzer harness of the compressed-tensors reader (quant_ctensors.h): the
 * input up to its first NUL byte is a config.json (none when the input has no NUL, or nothing
 * before it), the rest a safetensors file opened in memory. A config it parses strips to a
 * config.json without a quantization_config; a refused one hands nothing out and names the file;
 * any other text strips to a JSON object or is refused naming the file.
 * quant_ct_read() of the file with that config: what it accepts is well formed (every weight a
 * P.weight of rank 2 with its parts owned by it and by nothing else, no plain tensor of its
 * name, the other tensors plain),
 * and every small weight is decoded (quant_ct_scales, quant_ct_dequantize to F32 and BF16; one
 * thread, scalar kernels), failing only for a scale that has no value (an E8M0 NaN, a NaN block
 * scale, a global scale that is not finite and positive; named by file); what it refuses hands
 * nothing out and names the file.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "quant.h"
#include "quant_ctensors.h"

#define NAME       "fuzz.safetensors"
#define DECODE_MAX (1 << 16) /* weights up to this many elements are decoded */

static quant_ctx *ctx(void)
{
    static quant_ctx *c; /* one per process: one thread, the scalar kernels */
    if (!c) {
        quant_ctx_options o = {.threads = 1, .isa = QUANT_ISA_SCALAR};
        quant_error err;
        c = quant_ctx_new(&o, &err);
        FUZZ_CHECK(c);
    }
    return c;
}

static bool named(const quant_ck_error *err, const char *name)
{
    return memchr(err->message, '\0', sizeof err->message) &&
           strncmp(err->message, name, strlen(name)) == 0;
}

/* The config: parsed, or refused naming it; a parsed one strips to a config without one. */
static quant_ct_config *config(const char *text)
{
    quant_ct_config *cfg = (quant_ct_config *)1;
    quant_ck_error err;
    quant_ck_status st = quant_ct_config_parse(text, "config.json", &cfg, &err);
    if (st != QUANT_CK_OK) {
        FUZZ_CHECK(cfg == NULL);
        FUZZ_CHECK(st == QUANT_CK_ERR_FORMAT || st == QUANT_CK_ERR_UNSUPPORTED ||
                   st == QUANT_CK_ERR_NOMEM);
        FUZZ_CHECK(st == QUANT_CK_ERR_NOMEM || named(&err, "config.json: "));
        return NULL;
    }
    if (!cfg) {
        /* any text: stripped (a JSON object) or refused naming config.json */
        char *any = quant_ct_config_strip(text, &err);
        FUZZ_CHECK(any || named(&err, "config.json: "));
        free(any);
        return NULL;
    }
    char *stripped = quant_ct_config_strip(text, NULL);
    FUZZ_CHECK(stripped);
    quant_ct_config *again = (quant_ct_config *)1;
    FUZZ_CHECK(quant_ct_config_parse(stripped, "config.json", &again, &err) == QUANT_CK_OK);
    FUZZ_CHECK(again == NULL);
    free(stripped);
    return cfg;
}

static void decode(const quant_ct *c, const quant_ct_tensor *e)
{
    int64_t n = e->shape[0] * e->shape[1], sn = quant_numel(e->scale->rank, e->scale->shape);
    if (n > DECODE_MAX || sn > DECODE_MAX) return;
    float *scale = malloc((size_t)sn * sizeof *scale + 1), *out = malloc((size_t)n * 4 + 1);
    FUZZ_CHECK(scale && out);
    quant_ck_error err;
    quant_ck_status a = quant_ct_scales(c, e, scale, (size_t)sn, &err);
    FUZZ_CHECK(a == QUANT_CK_OK || (a == QUANT_CK_ERR_FORMAT && named(&err, NAME ": ")));
    quant_ck_status b = quant_ct_dequantize(ctx(), c, e, QUANT_ST_F32, out, (size_t)n * 4, &err);
    /* the scales can fail, and beside good scales a zero point outside its qtype's range */
    FUZZ_CHECK(b == a || (a == QUANT_CK_OK && e->zero_point && b == QUANT_CK_ERR_QUANT &&
                          named(&err, NAME ": ") && strstr(err.message, "is outside")));
    /* BF16 out: the same outcome, half the bytes */
    FUZZ_CHECK(quant_ct_dequantize(ctx(), c, e, QUANT_ST_BF16, out, (size_t)n * 2, &err) == b);
    FUZZ_CHECK(quant_ct_dequantize(ctx(), c, e, QUANT_ST_F32, out, (size_t)n * 4 + 1, &err) ==
               QUANT_CK_ERR_ARG);
    free(scale);
    free(out);
}

static void check_weights(const quant_st_file *f, const quant_ct *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const quant_ct_tensor *e = &c->tensors[i];
        size_t len = strlen(e->name);
        FUZZ_CHECK(len > 7 && strcmp(e->name + len - 7, ".weight") == 0);
        FUZZ_CHECK(e->data && e->scale && e->shape[0] > 0 && e->shape[1] > 0);
        FUZZ_CHECK(e->bits >= 2 && e->bits <= 8 && e->form < QUANT_CT_FORMS && e->format);
        FUZZ_CHECK(quant_ct_owner(c, e->data) == e && quant_ct_owner(c, e->scale) == e);
        FUZZ_CHECK(!e->zero_point || quant_ct_owner(c, e->zero_point) == e);
        FUZZ_CHECK(!e->global_scale || quant_ct_owner(c, e->global_scale) == e);
        /* the decoded P.weight takes no plain tensor's name */
        const quant_st_tensor *same = quant_st_find(f, e->name);
        FUZZ_CHECK(!same || quant_ct_owner(c, same) == e);
        decode(c, e);
    }
    size_t owned = 0;
    for (size_t i = 0; i < f->n_tensors; i++) owned += quant_ct_owner(c, &f->tensors[i]) != NULL;
    FUZZ_CHECK(owned >= 2 * c->n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t empty[1];
    const uint8_t *nul = size ? memchr(data, 0, size) : NULL;
    size_t clen = nul ? (size_t)(nul - data) : 0;
    const uint8_t *file = nul ? nul + 1 : (size ? data : empty);
    size_t flen = nul ? size - clen - 1 : size;
    char *text = fuzz_strndup(data, clen);
    FUZZ_CHECK(text);
    quant_ct_config *cfg = clen ? config(text) : NULL;
    quant_st_file *f = NULL;
    quant_ck_error err;
    if (quant_st_open_buffer(flen ? file : empty, flen, NAME, &f, &err) == QUANT_CK_OK) {
        quant_ct c;
        quant_ck_status st = quant_ct_read(f, cfg, &c, &err);
        if (st == QUANT_CK_OK) {
            FUZZ_CHECK(c.file == f);
            check_weights(f, &c);
            quant_ct_free(&c);
        } else {
            FUZZ_CHECK(c.n == 0 && c.tensors == NULL);
            FUZZ_CHECK(st == QUANT_CK_ERR_FORMAT || st == QUANT_CK_ERR_UNSUPPORTED ||
                       st == QUANT_CK_ERR_NOMEM || st == QUANT_CK_ERR_IO);
            FUZZ_CHECK(st == QUANT_CK_ERR_NOMEM || named(&err, NAME ": "));
        }
        (void)quant_ct_looks_like(f);
        quant_st_close(f);
    }
    quant_ct_config_free(cfg);
    free(text);
    return 0;
}
