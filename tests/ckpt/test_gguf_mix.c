/* test_gguf_mix.c -- the gguf_mix suite: llama-quantize's named mixes choose, per tensor of a
 * model, the types llama-quantize chose for the same model. The expectations for the
 * stories15M-shaped model (6 layers, rows of 288 and 768, tied embeddings) are what
 * llama-quantize wrote for stories15M's F32 GGUF, mix by mix; the 32-layer model checks the
 * layer rules (use_more_bits, the first eighth, the first attn_v) where no fallback hides them;
 * manual types, the fallbacks' last resort (F16), tensors never quantized, mix names.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ckutil.h"
#include "quant_gguf_mix.h"

#define MAX_TENSORS 512

typedef struct model {
    quant_gguf_mix_tensor t[MAX_TENSORS];
    char names[MAX_TENSORS][48];
    size_t n;
} model;

static void add(model *m, const char *name, int n_dims, int64_t ne0, int64_t ne1)
{
    ck_assert_uint_lt(m->n, MAX_TENSORS);
    snprintf(m->names[m->n], sizeof m->names[m->n], "%s", name);
    m->t[m->n] = (quant_gguf_mix_tensor){.name = m->names[m->n],
                                         .n_dims = n_dims,
                                         .ne = {ne0, ne1, 1, 1},
                                         .type = QUANT_GGML_F32,
                                         .manual = -1};
    m->n++;
}

/* A Llama in llama-quantize's tensor order: output_norm, [output,] token_embd, then per layer
 * attn_k, attn_norm, attn_output, attn_q, attn_v, ffn_down, ffn_gate, ffn_norm, ffn_up. */
static void llama_model(model *m, int layers, int64_t dim, int64_t hidden, int64_t vocab,
                        bool output)
{
    m->n = 0;
    add(m, "output_norm.weight", 1, dim, 1);
    if (output) add(m, "output.weight", 2, dim, vocab);
    add(m, "token_embd.weight", 2, dim, vocab);
    static const struct {
        const char *part;
        int dims, in; /* in: 0 = dim, 1 = hidden (ffn_down's rows) */
        int out;      /* 0 = dim, 1 = hidden, 2 = none (1-D) */
    } parts[] = {
        {"attn_k", 2, 0, 0},   {"attn_norm", 1, 0, 2}, {"attn_output", 2, 0, 0},
        {"attn_q", 2, 0, 0},   {"attn_v", 2, 0, 0},    {"ffn_down", 2, 1, 0},
        {"ffn_gate", 2, 0, 1}, {"ffn_norm", 1, 0, 2},  {"ffn_up", 2, 0, 1},
    };
    for (int l = 0; l < layers; l++)
        for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
            char name[48];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, parts[p].part);
            int64_t ne0 = parts[p].in ? hidden : dim;
            int64_t ne1 = parts[p].out == 0 ? dim : parts[p].out == 1 ? hidden : 1;
            add(m, name, parts[p].dims, ne0, ne1);
        }
}

static const char *type_name(int type)
{
    const quant_ggml_traits *t = quant_ggml_traits_get(type);
    return t ? t->name : "?";
}

/* Chooses with `mix_name` and compares with `want`: one word per tensor in model order, "keep"
 * for a tensor left as it is, else the type's name. */
static void expect_mix(const model *m, const quant_gguf_model *hp, const char *mix_name,
                       bool importance, const char *want)
{
    const quant_gguf_mix *mix = quant_gguf_mix_find(mix_name);
    ck_assert_msg(mix != NULL, "mix %s", mix_name);
    quant_gguf_choice c[MAX_TENSORS];
    quant_ck_error err = {0};
    ck_assert_int_eq(quant_gguf_mix_choose(mix, hp, importance, m->t, m->n, c, &err), QUANT_CK_OK);
    char *copy = strdup(want), *save = NULL, *word = strtok_r(copy, " ", &save);
    for (size_t i = 0; i < m->n; i++, word = strtok_r(NULL, " ", &save)) {
        ck_assert_msg(word != NULL, "%s: expectation ends before tensor %zu", mix_name, i);
        const char *got = c[i].why == QUANT_GGUF_KEPT ? "keep" : type_name(c[i].type);
        ck_assert_msg(!strcasecmp(got, word), "%s: %s is %s, llama-quantize chose %s", mix_name,
                      m->t[i].name, got, word);
    }
    ck_assert_msg(word == NULL, "%s: more expectations than tensors", mix_name);
    free(copy);
}

static const quant_gguf_model stories15m = {"llama", 6, 6, 6, 0};

/* What llama-quantize wrote for stories15M's F32 GGUF (no imatrix), in its tensor order. */
static const struct {
    const char *mix, *types;
} stories_expect[] = {
    {"Q4_K_M",
     "keep q8_0 q5_0 keep q5_0 q5_0 q5_0 q4_K q5_0 keep q5_0 q5_0 keep q5_0 q5_0 q5_0 q4_K q5_0 "
     "keep "
     "q5_0 q5_0 keep q5_0 q5_0 q8_0 q6_K q5_0 keep q5_0 q5_0 keep q5_0 q5_0 q5_0 q4_K q5_0 keep "
     "q5_0 "
     "q5_0 keep q5_0 q5_0 q5_0 q4_K q5_0 keep q5_0 q5_0 keep q5_0 q5_0 q8_0 q6_K q5_0 keep q5_0"},
    {"Q3_K_M",
     "keep q8_0 q4_0 keep q5_0 q4_0 q5_1 q4_K q4_0 keep q4_0 q4_0 keep q5_0 q4_0 q5_1 q4_K q4_0 "
     "keep "
     "q4_0 q4_0 keep q5_0 q4_0 q5_0 q4_K q4_0 keep q4_0 q4_0 keep q5_0 q4_0 q5_0 q4_K q4_0 keep "
     "q4_0 "
     "q4_0 keep q5_0 q4_0 q5_0 q4_K q4_0 keep q4_0 q4_0 keep q5_0 q4_0 q5_0 q4_K q4_0 keep q4_0"},
    {"Q2_K",
     "keep q8_0 q4_0 keep q4_0 q4_0 q4_0 q3_K q4_0 keep q4_0 q4_0 keep q4_0 q4_0 q4_0 q3_K q4_0 "
     "keep "
     "q4_0 q4_0 keep q4_0 q4_0 q4_0 q3_K q4_0 keep q4_0 q4_0 keep q4_0 q4_0 q4_0 q3_K q4_0 keep "
     "q4_0 "
     "q4_0 keep q4_0 q4_0 q4_0 q3_K q4_0 keep q4_0 q4_0 keep q4_0 q4_0 q4_0 q3_K q4_0 keep q4_0"},
    {"IQ4_NL",
     "keep q8_0 iq4_nl keep iq4_nl iq4_nl iq4_nl iq4_nl iq4_nl keep iq4_nl iq4_nl keep iq4_nl "
     "iq4_nl iq4_nl iq4_nl iq4_nl keep iq4_nl iq4_nl keep iq4_nl iq4_nl iq4_nl iq4_nl iq4_nl keep "
     "iq4_nl iq4_nl keep iq4_nl iq4_nl iq4_nl iq4_nl iq4_nl keep iq4_nl iq4_nl keep iq4_nl iq4_nl "
     "iq4_nl iq4_nl iq4_nl keep iq4_nl iq4_nl keep iq4_nl iq4_nl iq4_nl iq4_nl iq4_nl keep iq4_nl"},
    {"Q4_K_S",
     "keep q8_0 q5_0 keep q5_0 q5_0 q5_1 q4_K q5_0 keep q5_0 q5_0 keep q5_0 q5_0 q5_1 q4_K q5_0 "
     "keep "
     "q5_0 q5_0 keep q5_0 q5_0 q5_1 q4_K q5_0 keep q5_0 q5_0 keep q5_0 q5_0 q5_1 q4_K q5_0 keep "
     "q5_0 "
     "q5_0 keep q5_0 q5_0 q5_0 q4_K q5_0 keep q5_0 q5_0 keep q5_0 q5_0 q5_0 q4_K q5_0 keep q5_0"},
    {"Q5_K_M",
     "keep q8_0 q5_1 keep q5_1 q5_1 q5_1 q5_K q5_1 keep q5_1 q5_1 keep q5_1 q5_1 q5_1 q5_K q5_1 "
     "keep "
     "q5_1 q5_1 keep q5_1 q5_1 q8_0 q6_K q5_1 keep q5_1 q5_1 keep q5_1 q5_1 q5_1 q5_K q5_1 keep "
     "q5_1 "
     "q5_1 keep q5_1 q5_1 q5_1 q5_K q5_1 keep q5_1 q5_1 keep q5_1 q5_1 q8_0 q6_K q5_1 keep q5_1"},
};

START_TEST(stories15m_matches_llama_quantize)
{
    model *m = calloc(1, sizeof *m);
    llama_model(m, 6, 288, 768, 32000, false);
    ck_assert_uint_eq(m->n, 56);
    for (size_t i = 0; i < sizeof stories_expect / sizeof stories_expect[0]; i++)
        expect_mix(m, &stories15m, stories_expect[i].mix, false, stories_expect[i].types);
    free(m);
}
END_TEST

/* The type of tensor `name` in `m` under mix `mix_name`. */
static int type_of(const model *m, const quant_gguf_model *hp, const char *mix_name,
                   bool importance, const char *name)
{
    quant_gguf_choice c[MAX_TENSORS];
    quant_ck_error err = {0};
    ck_assert_int_eq(
        quant_gguf_mix_choose(quant_gguf_mix_find(mix_name), hp, importance, m->t, m->n, c, &err),
        QUANT_CK_OK);
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->t[i].name, name)) return c[i].type;
    ck_abort_msg("no tensor %s", name);
    return -1;
}

/* 32 layers of 4096 (rows 256-divisible, untied output): the layer rules themselves. */
START_TEST(layer_rules_of_a_32_layer_model)
{
    model *m = calloc(1, sizeof *m);
    llama_model(m, 32, 4096, 11008 + 256, 32000, true); /* 11264: a multiple of 256 */
    quant_gguf_model hp = {"llama", 32, 32, 8, 0};      /* GQA 4 */
    /* use_more_bits(i, 32): 0-3, 6, 9, ..., 27, 28-31 */
    const int more[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
    for (int l = 0; l < 32; l++) {
        bool mb = false;
        for (size_t k = 0; k < sizeof more / sizeof more[0]; k++) mb |= more[k] == l;
        char v[48], d[48];
        snprintf(v, sizeof v, "blk.%d.attn_v.weight", l);
        snprintf(d, sizeof d, "blk.%d.ffn_down.weight", l);
        int want = mb ? QUANT_GGML_Q6_K : QUANT_GGML_Q4_K;
        ck_assert_int_eq(type_of(m, &hp, "Q4_K_M", false, v), want);
        ck_assert_int_eq(type_of(m, &hp, "Q4_K_M", false, d), want);
        ck_assert_int_eq(type_of(m, &hp, "Q4_K_S", false, v),
                         l < 4 ? QUANT_GGML_Q5_K : QUANT_GGML_Q4_K);
        ck_assert_int_eq(type_of(m, &hp, "Q4_K_S", false, d),
                         l < 4 ? QUANT_GGML_Q5_K : QUANT_GGML_Q4_K);
        ck_assert_int_eq(type_of(m, &hp, "Q2_K", false, v), QUANT_GGML_Q4_K); /* GQA >= 4 */
        ck_assert_int_eq(type_of(m, &hp, "IQ4_XS", false, d),
                         l < 4 ? QUANT_GGML_Q5_K : QUANT_GGML_IQ4_XS);
        ck_assert_int_eq(type_of(m, &hp, "IQ4_XS", true, d), QUANT_GGML_IQ4_XS);
        ck_assert_int_eq(type_of(m, &hp, "Q4_0", true, d),
                         l < 4 ? QUANT_GGML_Q4_1 : QUANT_GGML_Q4_0);
        ck_assert_int_eq(type_of(m, &hp, "Q4_0", false, d), QUANT_GGML_Q4_0);
    }
    ck_assert_int_eq(type_of(m, &hp, "Q4_K_M", false, "output.weight"), QUANT_GGML_Q6_K);
    ck_assert_int_eq(type_of(m, &hp, "Q4_K_M", false, "token_embd.weight"), QUANT_GGML_Q4_K);
    ck_assert_int_eq(type_of(m, &hp, "Q8_0", false, "output.weight"), QUANT_GGML_Q8_0);
    ck_assert_int_eq(type_of(m, &hp, "Q4_K_M", false, "output_norm.weight"), QUANT_GGML_F32);
    free(m);
}
END_TEST

/* Counters follow llama-quantize's order (layer, then name), not the caller's. */
START_TEST(order_of_the_list_does_not_matter)
{
    model *m = calloc(1, sizeof *m), *r = calloc(1, sizeof *r);
    llama_model(m, 32, 4096, 11264, 32000, true);
    for (size_t i = 0; i < m->n; i++) {
        r->t[i] = m->t[m->n - 1 - i];
        r->t[i].name = m->t[m->n - 1 - i].name;
    }
    r->n = m->n;
    quant_gguf_model hp = {"llama", 32, 32, 32, 0};
    quant_gguf_choice a[MAX_TENSORS], b[MAX_TENSORS];
    quant_ck_error err = {0};
    const quant_gguf_mix *mix = quant_gguf_mix_find("q3_k_m");
    ck_assert_int_eq(quant_gguf_mix_choose(mix, &hp, false, m->t, m->n, a, &err), QUANT_CK_OK);
    ck_assert_int_eq(quant_gguf_mix_choose(mix, &hp, false, r->t, r->n, b, &err), QUANT_CK_OK);
    for (size_t i = 0; i < m->n; i++) ck_assert_int_eq(a[i].type, b[m->n - 1 - i].type);
    ck_assert_int_eq(type_of(m, &hp, "Q3_K_M", false, "blk.1.attn_v.weight"), QUANT_GGML_Q5_K);
    ck_assert_int_eq(type_of(m, &hp, "Q3_K_M", false, "blk.2.attn_v.weight"), QUANT_GGML_Q4_K);
    free(m);
    free(r);
}
END_TEST

START_TEST(manual_types_and_the_last_fallback)
{
    model *m = calloc(1, sizeof *m);
    llama_model(m, 2, 48, 96, 100, true); /* rows of 48 and 96: not a multiple of 32 for 48 */
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->t[i].name, "blk.0.ffn_down.weight"))
            m->t[i].manual = QUANT_GGML_Q8_0;
        else if (!strcmp(m->t[i].name, "blk.0.attn_norm.weight"))
            m->t[i].manual = QUANT_GGML_Q8_0; /* a norm is never quantized */
    quant_gguf_model hp = {"llama", 2, 4, 4, 0};
    quant_gguf_choice c[MAX_TENSORS];
    quant_ck_error err = {0};
    ck_assert_int_eq(
        quant_gguf_mix_choose(quant_gguf_mix_find("Q4_K_M"), &hp, false, m->t, m->n, c, &err),
        QUANT_CK_OK);
    for (size_t i = 0; i < m->n; i++) {
        const char *nm = m->t[i].name;
        if (!strcmp(nm, "blk.0.ffn_down.weight")) {
            ck_assert_int_eq(c[i].type, QUANT_GGML_Q8_0); /* 96 = 3 x 32 */
            ck_assert_int_eq(c[i].why, QUANT_GGUF_MANUAL);
        } else if (!strcmp(nm, "blk.0.attn_norm.weight")) {
            ck_assert_int_eq(c[i].why, QUANT_GGUF_KEPT);
        } else if (!strcmp(nm, "blk.0.attn_q.weight")) {
            ck_assert_int_eq(c[i].type, QUANT_GGML_F16); /* 48: no 32-block fits */
            ck_assert_int_eq(c[i].why, QUANT_GGUF_FALLBACK);
            ck_assert_int_eq(c[i].wanted, QUANT_GGML_Q4_K);
        }
    }
    /* no mix: only manual tensors change */
    ck_assert_int_eq(quant_gguf_mix_choose(NULL, &hp, false, m->t, m->n, c, &err), QUANT_CK_OK);
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->t[i].name, "blk.0.ffn_down.weight"))
            ck_assert_int_eq(c[i].type, QUANT_GGML_F32);
    free(m);
}
END_TEST

START_TEST(names_and_quantizable)
{
    ck_assert_ptr_nonnull(quant_gguf_mix_find("q4_k_m"));
    ck_assert_str_eq(quant_gguf_mix_find("iq4_xs")->name, "IQ4_XS");
    ck_assert_uint_eq(quant_gguf_mix_find("Q4_K_M")->file_type, 15);
    ck_assert_ptr_null(quant_gguf_mix_find("Q4_K_MM"));
    ck_assert_ptr_null(quant_gguf_mix_find("Q4_K"));
    ck_assert_ptr_null(quant_gguf_mix_find(NULL));
    size_t n = 0;
    while (quant_gguf_mix_at(n)) n++;
    ck_assert_uint_ge(n, 13);
    ck_assert(quant_gguf_quantizable("blk.0.attn_q.weight", 2));
    ck_assert(!quant_gguf_quantizable("blk.0.attn_q.weight", 1));
    ck_assert(!quant_gguf_quantizable("blk.0.attn_q.bias", 2));
    ck_assert(!quant_gguf_quantizable("blk.0.attn_norm.weight", 2));
    ck_assert(!quant_gguf_quantizable("blk.0.ffn_gate_inp.weight", 2));
    ck_assert(!quant_gguf_quantizable("position_embd.weight", 2));
}
END_TEST

START_TEST(experts_need_layer_numbers)
{
    model *m = calloc(1, sizeof *m);
    add(m, "x.ffn_down.weight", 2, 256, 256);
    quant_gguf_model hp = {"llama", 4, 8, 8, 8};
    quant_gguf_choice c[1];
    quant_ck_error err = {0};
    ck_assert_int_eq(
        quant_gguf_mix_choose(quant_gguf_mix_find("Q4_K_M"), &hp, false, m->t, m->n, c, &err),
        QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "x.ffn_down.weight"));
    snprintf(m->names[0], sizeof m->names[0], "blk.9.ffn_down.weight");
    ck_assert_int_eq(
        quant_gguf_mix_choose(quant_gguf_mix_find("Q4_K_M"), &hp, false, m->t, m->n, c, &err),
        QUANT_CK_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "layer 9"));
    free(m);
}
END_TEST

Suite *suite_gguf_mix(void)
{
    Suite *s = suite_create("gguf_mix");
    TCase *tc = tcase_create("mix");
    tcase_add_test(tc, stories15m_matches_llama_quantize);
    tcase_add_test(tc, layer_rules_of_a_32_layer_model);
    tcase_add_test(tc, order_of_the_list_does_not_matter);
    tcase_add_test(tc, manual_types_and_the_last_fallback);
    tcase_add_test(tc, names_and_quantizable);
    tcase_add_test(tc, experts_need_layer_numbers);
    suite_add_tcase(s, tc);
    return s;
}
