/* fuzz_rules.c -- libFuzzer harness of rule sets: the input up to its first NUL byte is parsed
 * with quant_ruleset_parse(); a set that parses is matched (quant_ruleset_match) against module
 * paths taken from the input (the NUL-separated strings after the first NUL, or, when there are
 * none, a few fixed paths, the rules' own module_path texts and quant_module_path() of each), and
 * each rule with a weight qtype is turned into a quant_how (quant_rule_how) for a few shapes;
 * the small ones are quantized and dequantized on fixed data (one thread, scalar kernels).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "quant.h"
#include "quant_rules.h"

#define MAX_PATHS   8
#define QUANT_ELEMS 4096 /* shapes up to this many elements are quantized */

static const char *const fixed_paths[] = {
    "",
    "lm_head",
    "model.embed_tokens",
    "model.layers.0.mlp.up_proj",
    "model.layers.12.self_attn.o_proj",
    "model/layers/0/mlp/dot_general0_lhs",
};

static const struct {
    int rank;
    int64_t shape[QUANT_MAX_RANK];
} shapes[] = {
    {0, {0}},
    {1, {64}},
    {2, {172, 64}},
    {2, {64, 16}},
    {3, {4, 6, 8}},
    {2, {0, 8}},
    {2, {1 << 20, 1 << 12}},
    {4, {2, 3, 4, 5}},
    {8, {2, 2, 2, 2, 2, 2, 2, 2}},
};

static quant_ctx *ctx(void)
{
    static quant_ctx
        *c; /* one per process: one thread, the scalar kernels (the same on every CPU) */
    if (!c) {
        quant_ctx_options o = {.threads = 1, .isa = QUANT_ISA_SCALAR};
        quant_error err;
        c = quant_ctx_new(&o, &err);
        FUZZ_CHECK(c);
    }
    return c;
}

/* Quantizes and dequantizes a fixed tensor of this shape with `how` (errors are fine: a rule
 * may ask for what a shape cannot give; crashes and sanitizer reports are not). */
static void quantize(const quant_how *how, int rank, const int64_t *shape)
{
    int64_t n = quant_numel(rank, shape);
    if (n < 0 || n > QUANT_ELEMS) return;
    int64_t sshape[QUANT_MAX_RANK];
    quant_error err;
    if (quant_scale_shape(how, rank, shape, sshape, &err) != QUANT_OK) return;
    int64_t ns = quant_numel(rank, sshape);
    int64_t qb = quant_qvalue_bytes(how, rank, shape);
    FUZZ_CHECK(ns >= 0 && qb >= 0 && (n == 0 || ns <= n)); /* an empty tensor may have scales */
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    float *y = malloc((size_t)(n ? n : 1) * sizeof *y);
    float *scale = malloc((size_t)(ns ? ns : 1) * sizeof *scale);
    int32_t *zp = malloc((size_t)(ns ? ns : 1) * sizeof *zp);
    uint8_t *q = malloc((size_t)(qb ? qb : 1));
    FUZZ_CHECK(x && y && scale && zp && q);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 37) % 101 - 50) * 0.03125f;
    quant_tensor tx, ty;
    FUZZ_CHECK(quant_tensor_init(&tx, QUANT_DTYPE_F32, rank, shape, x, &err) == QUANT_OK);
    FUZZ_CHECK(quant_tensor_init(&ty, QUANT_DTYPE_F32, rank, shape, y, &err) == QUANT_OK);
    int32_t *zpp = quant_how_asymmetric(how) ? zp : NULL;
    if (quant_quantize(ctx(), how, &tx, q, scale, zpp, &err) == QUANT_OK)
        FUZZ_CHECK(quant_dequantize(ctx(), how, q, scale, zpp, &ty, &err) == QUANT_OK);
    free(x);
    free(y);
    free(scale);
    free(zp);
    free(q);
}

static void rule_hows(const quant_ruleset *rs)
{
    for (size_t i = 0; i < quant_ruleset_count(rs); i++) {
        const quant_rule *r = quant_ruleset_rule(rs, i);
        FUZZ_CHECK(r && r->module_path);
        if (!r->has_weight_qtype) continue;
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            quant_how how;
            quant_ck_error err;
            quant_ck_status st = quant_rule_how(r, "model.layers.0.mlp.up_proj.weight",
                                                shapes[k].rank, shapes[k].shape, &how, &err);
            FUZZ_CHECK(st == QUANT_CK_OK || st == QUANT_CK_ERR_QUANT);
            if (st == QUANT_CK_OK) quantize(&how, shapes[k].rank, shapes[k].shape);
        }
    }
}

static void match(const quant_ruleset *rs, const char *path)
{
    long m = quant_ruleset_match(rs, path);
    FUZZ_CHECK(m >= -2 &&
               m < (long)quant_ruleset_count(rs)); /* -2: a matching limit hit (documented) */
    char mod[256];
    if (quant_module_path(path, mod, sizeof mod)) {
        FUZZ_CHECK(strlen(mod) <= strlen(path));
        m = quant_ruleset_match(rs, mod);
        FUZZ_CHECK(m >= -2 &&
                   m < (long)quant_ruleset_count(rs)); /* -2: a matching limit hit (documented) */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    FUZZ_CHECK(text);
    size_t json_len = strlen(text); /* up to the first NUL */
    quant_ruleset *rs = NULL;
    quant_ck_error err;
    quant_ck_status st = quant_ruleset_parse(text, json_len, "fuzz.json", &rs, &err);
    if (st != QUANT_CK_OK) {
        FUZZ_CHECK(!rs && (st == QUANT_CK_ERR_RULES || st == QUANT_CK_ERR_NOMEM));
        FUZZ_CHECK(err.status == st && memchr(err.message, '\0', sizeof err.message));
        free(text);
        return 0;
    }
    FUZZ_CHECK(rs);
    int given = 0;
    for (size_t at = json_len + 1; at < size && given < MAX_PATHS; given++) {
        match(rs, text + at);
        at += strlen(text + at) + 1;
    }
    if (given == 0) {
        for (size_t i = 0; i < sizeof fixed_paths / sizeof fixed_paths[0]; i++)
            match(rs, fixed_paths[i]);
        for (size_t i = 0; i < quant_ruleset_count(rs) && i < MAX_PATHS; i++)
            match(rs, quant_ruleset_rule(rs, i)->module_path);
    }
    rule_hows(rs);
    quant_ruleset_free(rs);
    free(text);
    return 0;
}
