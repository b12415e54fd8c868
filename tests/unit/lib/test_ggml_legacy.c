/* test_ggml_legacy.c -- ggml's block types q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs and
 * mxfp4 (quant_ggml.h): the traits rows, golden vectors from ggml itself (its bytes without
 * importance, its weighted error with importance, its to_float), hand-computed blocks, round
 * trips within each block's expressible error, all-zero blocks, the refusals, the thread count
 * and mxfp4's extremes.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The golden constants were produced by ggml's own ggml-quants.c (d99724f, built with
 * -ffp-contract=off -DNDEBUG, no -march) through ggml_quantize_chunk's per-type functions
 * (quantize_q4_0 ...) and dequantize_row_*, on the inputs gold_row / gold_importance /
 * gold_blocks / gold_row2 / gold_importance2 below build: for each type the row's bytes
 * without importance, the weighted error sum_j w_j (x_j - y_j)^2 (float64, index order) of
 * ggml's bytes with importance, and an FNV-1a hash of the float32 bits ggml's to_float gives
 * for 1024 values of pseudo-random blocks.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../testutil.h"
#include "quant_ggml.h"

#define N_TYPES 8
static const quant_ggml_type block_types[N_TYPES] = {
    QUANT_GGML_Q8_0, QUANT_GGML_Q4_0,   QUANT_GGML_Q4_1,   QUANT_GGML_Q5_0,
    QUANT_GGML_Q5_1, QUANT_GGML_IQ4_NL, QUANT_GGML_IQ4_XS, QUANT_GGML_MXFP4};

/* ---- the golden inputs ---------------------------------------------------------------------- */

static uint32_t gold_hash(uint32_t v)
{
    v *= 2654435761u;
    v ^= v >> 15;
    v *= 2246822519u;
    v ^= v >> 13;
    return v;
}

/* 256 values, eight 32-value blocks of different kinds: spread, zero, tiny, wide, all positive,
 * multiples of 1/256 (rounding ties), one outlier, all negative. */
static void gold_row(float *x)
{
    for (uint32_t j = 0; j < 256; j++) {
        uint32_t h = gold_hash(j + 1);
        float even = (float)((int)(h % 2001u) - 1000) / 256.0f;
        float v = (float)((int)(h % 200001u) - 100000) / 3333.0f;
        switch (j / 32) {
        case 0:
            x[j] = v;
            break;
        case 1:
            x[j] = 0.0f;
            break;
        case 2:
            x[j] = v * 1e-20f;
            break;
        case 3:
            x[j] = v * 4.0f;
            break;
        case 4:
            x[j] = fabsf(v) + 5.0f;
            break;
        case 5:
            x[j] = even;
            break;
        case 6:
            x[j] = j == 199 ? 3.0f : v * 0.01f;
            break;
        default:
            x[j] = -fabsf(v) * 0.5f;
            break;
        }
    }
}

/* Importance 0 .. 9.99, zero at every seventh column. */
static void gold_importance(float *w)
{
    for (uint32_t j = 0; j < 256; j++) {
        uint32_t h = gold_hash(j + 1000);
        w[j] = j % 7 == 3 ? 0.0f : (float)(h % 1000u) / 100.0f;
    }
}

/* 512 values of a smooth spread with a few large ones; `seed` picks the row. */
static void gold_row2(float *x, uint32_t seed)
{
    for (uint32_t j = 0; j < 512; j++) {
        uint32_t h = gold_hash(j * 7u + seed);
        float v = (float)((int)(h % 20001u) - 10000) / 5000.0f;
        x[j] = v * v * v + (h % 61u == 0 ? 8.0f : 0.0f);
    }
}

/* Importance of five kinds: 0 spread, 1 all ones, 2 mostly zero, 3 squared (heavy tails),
 * 4 all zero. */
static void gold_importance2(float *w, int kind)
{
    for (uint32_t j = 0; j < 512; j++) {
        uint32_t h = gold_hash(j + 77u * (uint32_t)kind);
        float u = (float)(h % 1000u) / 100.0f;
        switch (kind) {
        case 0:
            w[j] = u;
            break;
        case 1:
            w[j] = 1.0f;
            break;
        case 2:
            w[j] = h % 10u == 0 ? u : 0.0f;
            break;
        case 3:
            w[j] = u * u;
            break;
        default:
            w[j] = 0.0f;
            break;
        }
    }
}

/* n bytes of blocks of `bytes` whose `scales` leading fp16 scales are kept finite. */
static void gold_blocks(uint8_t *b, int64_t n, size_t bytes, int scales, uint32_t seed)
{
    for (int64_t k = 0; k < n; k++) b[k] = (uint8_t)(gold_hash((uint32_t)k + seed) >> 7);
    for (int64_t i = 0; i < n / (int64_t)bytes; i++)
        for (int s = 0; s < scales; s++) {
            uint8_t *p = b + i * (int64_t)bytes + 2 * s;
            if (((p[1] >> 2) & 0x1f) == 0x1f) p[1] ^= 0x40;
        }
}

static uint64_t gold_fnv(const float *y, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        for (int k = 0; k < 4; k++) {
            h ^= (u >> (8 * k)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

/* ---- ggml's answers -------------------------------------------------------------------------- */

typedef struct golden_type {
    quant_ggml_type type;
    const char *bytes_hex; /* gold_row quantized without importance */
    double weighted_error; /* of ggml's bytes for gold_row with gold_importance */
    uint64_t dequant_fnv;  /* gold_blocks(seed 7919 * type) of 1024 values, dequantized */
} golden_type;

static const golden_type goldens[] = {
    {QUANT_GGML_Q8_0,
     "8c33493282f59623ff5c4cd3640e77347a1af8571715297c4b9c8116faa8181b62a400000000000000000000"
     "00000000000000000000000000000000000000000000000000002c5bf6710ea63cc22a242bf9ed8147d5d75a"
     "d966003fea97e0ebee676b1ea0234d3b7cf0535ec34d81c2d07edbc165ad2b37684c2ea9282f94441097d2f4"
     "482e09715d342776205c7e4058517e533869394017174b3920585638657f5d4e286c347b7937ce27aa40f152"
     "56667f4c41d97cb4aacb662ca45ad458e7781850e460b8ff20a3d1a60c2606faf40001030a7ff50109f704fb"
     "fa0b05fa030b05080303f60903f7fd090bfe872ff497a3edfc8186b6ceb3b5d9f5da8eabe9f7acc8d6abbf9d"
     "9b84f19ce8e5efe4",
     8.0312228499117015, 0xdb9284e7737d1643ull},
    {QUANT_GGML_Q4_0,
     "7d438ddb9097b1fad82e0d958e29afabef2a00808888888888888888888888888888888800005bee67ef89c2"
     "7c146b7a7be8f7a02ca53f4bffd7bd2eb4bd10c4951f5674deb39bfb54c43641662230542203203354115404"
     "0757beb7ed24b923a3026033a42ad08d6debb2e500b688888978887887809978879988787887783f77713247"
     "583040232503732667667163",
     2521.10928282749, 0xf823d45a01784d2cull},
    {QUANT_GGML_Q4_1,
     "e7437dcf7cdb9097a1fac82d0c957e289f9bdf29000000000000000000000000000000000000000000000080"
     "5bee57ef89c27c146b7a7be7f7a02ca5b24b3fd7efc7ac2da4ac10c4951f5574cea38aeb923f3a46825e119a"
     "9f56b9f8af8925cc45e6e0502937aec100db35cc5cfd8fcc4bd41f6190033d09033397b4221120312122222f"
     "0021220012213112b83b78cbdee3549daf5081373906e63bdecbd2c5",
     2223.5963809038381, 0x745d58ac72fb8660ull},
    {QUANT_GGML_Q5_0,
     "7d3fe3fd7e72f9b6303f53f4a03c0a3afd523f36cf430080ffffffff00000000000000000000000000000000"
     "00005b473ab8b6bbbfde0285d838c5d5e5dfee40494b3f472dd2b7f1dfae6a5c586a20982a3fabf89d6615e7"
     "54c0000000007b91cc54509835064066b92399081d9dbeb3053a15edcb5862563513d0664845900acbc763ba"
     "00b23e7bc69dff1102f0f0f00f0011f00f1100f1f10f783b10000000dff3549eb05081473a06e73bdfdbe2c5",
     517.90788612683104, 0x404a8c744ae2281bull},
    {QUANT_GGML_Q5_1,
     "a63f7dcfe3fd7e72f9a6302e53f4903b092afc513e36cf430000000000000000000000000000000000000000"
     "00000000000000805b473ab8b6ccbfef0295e838c6e5e6efee404a5b72473fd72dd2b7f1cf9e5a5b58592088"
     "2a3fabe88c5515d6543b3a46da0bd96b05ac33353fac73f15f125a989aecd0a0ed32aec1fac5ea1201a67ba9"
     "a9ec1f8896b83fd221066c03c92e97b480000000441130534353353f0053351124525125783778cb19395bf4"
     "ade5b92b5fb0017d741dcd76ad96c39b",
     448.14328093691313, 0x6027534aa7292a46ull},
    {QUANT_GGML_IQ4_NL,
     "db337deca0a7b1fbd81e0da47e29afacef2a0000888888888888888888888888888888880000888888888888"
     "88888888888888888888b83befd7bd2eb3bd10d3941f4573deb29bfc43b42530552120431202102253114303"
     "0646b6a7ee23b922a2016022a31bd08d5eecc1e40ca6778889787878878099788799887878873f2f67712136"
     "482030121402721567656052",
     2629.2314148727473, 0xb30cac4ddc4e85c6ull},
    {QUANT_GGML_IQ4_XS,
     "b8a7296a080019c17deca0a7b1fbd81e0da47e29afacef2a8888888888888888888888888888888888888888"
     "888888888888888888888888efd7bd2eb3bd10d3941f4573deb29bfc25405522204312022022541143030646"
     "ee23b922a2016022a31bd08d5eecc1e488888978887887819978879888787887677122465820301314027315"
     "67656162",
     2809.5313549353591, 0xf4b19fcae353f990ull},
    {QUANT_GGML_MXFP4,
     "8196753f294f7460f7f63d97f2373577f300000000000000000000000000000000003fc466b966015ea5edb4"
     "a3a4696a3fe53c83776a56e74d56ff6e2df7dc9e675e147582534622555644556556553466446462427eff76"
     "da77b7773766b67ce70e4ffdd7f57e0199091000100107991001990010190180b99fefdac0efeffefdfeaefc"
     "b9bcafbe",
     9459.5162957483426, 0x2ce06e234ca16c46ull},
};

/* ggml's weighted error for gold_row2 with gold_importance2: [5 * row + kind], row 0 seed
 * 1000, row 1 seed 2000, kinds 0..4. */
static const struct {
    quant_ggml_type type;
    double error[10];
} goldens2[N_TYPES] = {
    {QUANT_GGML_Q8_0,
     {0.66899133890850915, 0.13328645008122708, 0.060358902586888842, 4.1078108107432154, 0,
      0.7466441962395084, 0.14651436261773992, 0.061084518140534345, 4.7632863118561648, 0}},
    {QUANT_GGML_Q4_0,
     {119.48344139399751, 25.952049933490827, 3.7672574048626868, 762.11379473840623, 0,
      137.42980710032816, 28.402787339085211, 3.9568309363944363, 925.38106305581698, 0}},
    {QUANT_GGML_Q4_1,
     {110.98435004804543, 24.011198099237838, 1.3260343559872123, 627.56310590858413, 0,
      121.22856966923617, 25.867938689049556, 1.7196793243137971, 738.9289733047118, 0}},
    {QUANT_GGML_Q5_0,
     {33.981902662073168, 6.9719749990331712, 0.99864741722153438, 201.34157527263403, 0,
      35.755651234921558, 7.4226326182080316, 1.3861681548575566, 211.9700555464205, 0}},
    {QUANT_GGML_Q5_1,
     {27.646128227710388, 5.820284982468479, 0.30383308673089415, 161.39652424004095, 0,
      27.247630557876398, 5.6971113439010788, 0.55266019759828644, 157.12230525143394, 0}},
    {QUANT_GGML_IQ4_NL,
     {115.75154585642808, 23.623766271237727, 2.729544789825352, 666.65157653023743, 0,
      125.29237944785065, 25.446035577359879, 2.2154211970844218, 732.72685353815859, 0}},
    {QUANT_GGML_IQ4_XS,
     {117.20986621882328, 23.870658170426399, 3.3831494565834261, 680.83674110350444, 0,
      126.990930623482, 25.637759657958842, 2.3319029479084334, 743.37178642526055, 0}},
    {QUANT_GGML_MXFP4,
     {367.69476117472158, 79.955854943080894, 39.973063787972208, 2659.1556573589369, 0,
      490.50499135471244, 97.926825070838376, 37.38198754762827, 2706.3596144669091, 0}},
};

static const golden_type *golden_of(quant_ggml_type t)
{
    for (int i = 0; i < N_TYPES; i++)
        if (goldens[i].type == t) return &goldens[i];
    return NULL;
}

static void hex_to_bytes(const char *hex, uint8_t *out, size_t n)
{
    ck_assert_uint_eq(strlen(hex), 2 * n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

/* The number of leading fp16 scales of a block (0 for mxfp4's E8M0 byte). */
static int fp16_scales(quant_ggml_type t)
{
    return t == QUANT_GGML_MXFP4 ? 0 : t == QUANT_GGML_Q4_1 || t == QUANT_GGML_Q5_1 ? 2 : 1;
}

static double weighted_error(const float *x, const float *y, const float *w, int64_t n)
{
    double e = 0;
    for (int64_t j = 0; j < n; j++) {
        double d = (double)x[j] - (double)y[j];
        e += (w ? (double)w[j] : 1.0) * d * d;
    }
    return e;
}

/* ---- tests ----------------------------------------------------------------------------------- */

START_TEST(traits_rows)
{
    static const struct {
        quant_ggml_type t;
        const char *name, *ggml_name;
        int64_t block;
        size_t bytes;
        bool imp;
    } rows[N_TYPES] = {
        {QUANT_GGML_Q8_0, "q8_0", "Q8_0", 32, 34, false},
        {QUANT_GGML_Q4_0, "q4_0", "Q4_0", 32, 18, true},
        {QUANT_GGML_Q4_1, "q4_1", "Q4_1", 32, 20, true},
        {QUANT_GGML_Q5_0, "q5_0", "Q5_0", 32, 22, true},
        {QUANT_GGML_Q5_1, "q5_1", "Q5_1", 32, 24, true},
        {QUANT_GGML_IQ4_NL, "iq4_nl", "IQ4_NL", 32, 18, true},
        {QUANT_GGML_IQ4_XS, "iq4_xs", "IQ4_XS", 256, 136, true},
        {QUANT_GGML_MXFP4, "mxfp4", "MXFP4", 32, 17, false},
    };
    for (int i = 0; i < N_TYPES; i++) {
        const quant_ggml_traits *t = quant_ggml_traits_get(rows[i].t);
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->type, rows[i].t);
        ck_assert_str_eq(t->name, rows[i].name);
        ck_assert_str_eq(t->ggml_name, rows[i].ggml_name);
        ck_assert_int_eq(t->block, rows[i].block);
        ck_assert_uint_eq(t->block_bytes, rows[i].bytes);
        ck_assert_int_eq(t->uses_importance, rows[i].imp);
        ck_assert(t->quantized);
        ck_assert(t->quantize_row != NULL);
        ck_assert(t->dequantize_row != NULL);
        ck_assert_ptr_eq(quant_ggml_traits_by_name(rows[i].name), t);
        ck_assert_ptr_eq(quant_ggml_traits_by_name(rows[i].ggml_name), t);
        ck_assert_int_eq(quant_ggml_row_bytes(rows[i].t, 4096),
                         4096 / rows[i].block * (int64_t)rows[i].bytes);
        ck_assert_int_eq(quant_ggml_row_bytes(rows[i].t, rows[i].block + 16), -1);
    }
}
END_TEST

/* Without importance every type writes ggml's bytes; q8_0 and mxfp4, whose ggml quantizers
 * ignore importance, write them with importance too. */
START_TEST(golden_bytes)
{
    float x[256], w[256];
    gold_row(x);
    gold_importance(w);
    for (int i = 0; i < N_TYPES; i++) {
        const quant_ggml_traits *t = quant_ggml_traits_get(block_types[i]);
        int64_t n = quant_ggml_row_bytes(t->type, 256);
        uint8_t want[1088], got[1088];
        hex_to_bytes(golden_of(t->type)->bytes_hex, want, (size_t)n);
        quant_error err;
        ck_assert_int_eq(quant_ggml_quantize(NULL, t->type, x, 1, 256, NULL, got, &err), QUANT_OK);
        ck_assert_msg(!memcmp(got, want, (size_t)n), "%s: bytes differ from ggml's", t->name);
        if (t->uses_importance) continue;
        ck_assert_int_eq(quant_ggml_quantize(NULL, t->type, x, 1, 256, w, got, &err), QUANT_OK);
        ck_assert_msg(!memcmp(got, want, (size_t)n), "%s: importance changed the bytes", t->name);
    }
}
END_TEST

/* With importance the weighted error is never above ggml's; without a search it is ggml's. */
START_TEST(golden_weighted_error)
{
    float x[256], w[256], y[256];
    uint8_t q[1088];
    gold_row(x);
    gold_importance(w);
    for (int i = 0; i < N_TYPES; i++) {
        const quant_ggml_traits *t = quant_ggml_traits_get(block_types[i]);
        double want = golden_of(t->type)->weighted_error;
        double got = quant_ggml_row_error(t->type, x, 256, w);
        ck_assert_msg(got <= want, "%s: weighted error %.17g above ggml's %.17g", t->name, got,
                      want);
        if (!t->uses_importance)
            ck_assert_msg(got == want, "%s: %.17g, ggml %.17g", t->name, got, want);
        /* quant_ggml_row_error is the error of the bytes quant_ggml_quantize writes */
        quant_error err;
        ck_assert_int_eq(quant_ggml_quantize(NULL, t->type, x, 1, 256, w, q, &err), QUANT_OK);
        ck_assert_int_eq(quant_ggml_dequantize(NULL, t->type, q, 1, 256, y, &err), QUANT_OK);
        ck_assert(weighted_error(x, y, w, 256) == got);
    }
}
END_TEST

/* More rows and importance shapes (all ones, mostly zero, heavy, all zero): never above ggml's
 * weighted error; equal to it for q8_0 and mxfp4. */
START_TEST(golden_weighted_error_shapes)
{
    float x[512], w[512];
    for (int i = 0; i < N_TYPES; i++) {
        const quant_ggml_traits *t = quant_ggml_traits_get(goldens2[i].type);
        for (int row = 0; row < 2; row++)
            for (int kind = 0; kind < 5; kind++) {
                gold_row2(x, 1000u * (uint32_t)(row + 1));
                gold_importance2(w, kind);
                double want = goldens2[i].error[5 * row + kind];
                double got = quant_ggml_row_error(t->type, x, 512, w);
                ck_assert_msg(got <= want, "%s row %d kind %d: %.17g above ggml's %.17g", t->name,
                              row, kind, got, want);
                if (!t->uses_importance)
                    ck_assert_msg(got == want, "%s row %d kind %d: %.17g, ggml %.17g", t->name, row,
                                  kind, got, want);
            }
    }
}
END_TEST

START_TEST(golden_dequantize)
{
    static uint8_t b[1024 / 32 * 34];
    static float y[1024];
    for (int i = 0; i < N_TYPES; i++) {
        const quant_ggml_traits *t = quant_ggml_traits_get(block_types[i]);
        int64_t n = quant_ggml_row_bytes(t->type, 1024);
        gold_blocks(b, n, t->block_bytes, fp16_scales(t->type), (uint32_t)t->type * 7919u);
        quant_error err;
        ck_assert_int_eq(quant_ggml_dequantize(NULL, t->type, b, 1, 1024, y, &err), QUANT_OK);
        ck_assert_msg(gold_fnv(y, 1024) == golden_of(t->type)->dequant_fnv,
                      "%s: to_float differs from ggml's", t->name);
    }
}
END_TEST

/* Blocks decoded by hand from the layouts. */
START_TEST(dequantize_by_hand)
{
    float y[256];
    quant_error err;
    /* q4_1: d 1.0, m -1.0; qs[0] 0x5a: value 0 is 10 - 1, value 16 is 5 - 1 */
    uint8_t q41[20] = {0x00, 0x3c, 0x00, 0xbc, 0x5a};
    ck_assert_int_eq(quant_ggml_dequantize(NULL, QUANT_GGML_Q4_1, q41, 1, 32, y, &err), QUANT_OK);
    ck_assert_float_eq(y[0], 9.0f);
    ck_assert_float_eq(y[16], 4.0f);
    ck_assert_float_eq(y[1], -1.0f);
    /* q5_0: d 0.5; qh bit 0 and bit 17 set; qs[0] 0x21, qs[1] 0x00 */
    uint8_t q50[22] = {0x00, 0x38, 0x01, 0x00, 0x02, 0x00, 0x21, 0x00};
    ck_assert_int_eq(quant_ggml_dequantize(NULL, QUANT_GGML_Q5_0, q50, 1, 32, y, &err), QUANT_OK);
    ck_assert_float_eq(y[0], (17 - 16) * 0.5f);
    ck_assert_float_eq(y[16], (2 - 16) * 0.5f);
    ck_assert_float_eq(y[17], (16 - 16) * 0.5f);
    ck_assert_float_eq(y[1], (0 - 16) * 0.5f);
    /* q8_0: d 2.0, qs[3] = -5 */
    uint8_t q80[34] = {0x00, 0x40, 0, 0, 0, 0xfb};
    ck_assert_int_eq(quant_ggml_dequantize(NULL, QUANT_GGML_Q8_0, q80, 1, 32, y, &err), QUANT_OK);
    ck_assert_float_eq(y[3], -10.0f);
    /* iq4_nl: d 0.25, nibbles 0 and 15: levels -127 and 113 */
    uint8_t nl[18] = {0x00, 0x34, 0xf0};
    ck_assert_int_eq(quant_ggml_dequantize(NULL, QUANT_GGML_IQ4_NL, nl, 1, 32, y, &err), QUANT_OK);
    ck_assert_float_eq(y[0], -127 * 0.25f);
    ck_assert_float_eq(y[16], 113 * 0.25f);
    /* iq4_xs: d 1.0; sub-block 0 ls 33 (low 1, high 2), sub-block 3 ls 0 (l = -32), sub-block 1
     * ls 32 (zero); every nibble 8 (level 1) */
    uint8_t xs[136] = {0x00, 0x3c};
    uint16_t h = 2u << 0 | 2u << 2 | 2u << 4 | 0u << 6 | 2u << 8 | 2u << 10 | 2u << 12 | 2u << 14;
    xs[2] = (uint8_t)(h & 0xff);
    xs[3] = (uint8_t)(h >> 8);
    xs[4] = 0x01;
    memset(xs + 8, 0x88, 128);
    ck_assert_int_eq(quant_ggml_dequantize(NULL, QUANT_GGML_IQ4_XS, xs, 1, 256, y, &err), QUANT_OK);
    ck_assert_float_eq(y[0], 1.0f);
    ck_assert_float_eq(y[32], 0.0f);
    ck_assert_float_eq(y[96], -32.0f);
    /* mxfp4: e 128 (d 1: levels are twice E2M1), e 0 (2^-128) */
    uint8_t mx[34] = {128, 0x97, [17] = 0, 0x07};
    ck_assert_int_eq(quant_ggml_dequantize(NULL, QUANT_GGML_MXFP4, mx, 1, 64, y, &err), QUANT_OK);
    ck_assert_float_eq(y[0], 12.0f);
    ck_assert_float_eq(y[16], -1.0f);
    ck_assert_float_eq(y[32], 12.0f * ldexpf(1.0f, -128));
}
END_TEST

/* Without importance every value comes back within what its block can express: a bound from
 * the block's largest magnitude (and, for the affine types, its range) that covers the code
 * step, the clip at the far end and the fp16 scale's rounding, relative (2^-11) for a normal
 * fp16 scale and absolute (2^-25 per code unit) for a subnormal one. */
static float expressible_error(quant_ggml_type t, const float *x, const float *super)
{
    float amax = 0, mn = x[0], mx = x[0], samax = 0;
    for (int j = 0; j < 32; j++) {
        amax = fmaxf(amax, fabsf(x[j]));
        mn = fminf(mn, x[j]);
        mx = fmaxf(mx, x[j]);
    }
    for (int j = 0; super && j < 256; j++) samax = fmaxf(samax, fabsf(super[j]));
    const float unit = ldexpf(1.0f, -24);
    switch (t) {
    case QUANT_GGML_Q8_0:
        return amax * (0.5f / 127 + 0.001f) + 128 * unit;
    case QUANT_GGML_Q4_0:
        return amax * (1.0f / 8 + 0.001f) + 8 * unit;
    case QUANT_GGML_Q5_0:
        return amax * (1.0f / 16 + 0.001f) + 16 * unit;
    case QUANT_GGML_Q4_1:
        return (mx - mn) / 30 + amax * 0.002f + 16 * unit;
    case QUANT_GGML_Q5_1:
        return (mx - mn) / 62 + amax * 0.002f + 32 * unit;
    case QUANT_GGML_IQ4_NL:
        return amax * 0.125f + 128 * unit;
    case QUANT_GGML_IQ4_XS:
        return amax * 0.125f + samax * 0.03f + 128 * 32 * unit;
    default:
        return amax * 0.5f; /* mxfp4: levels reach at least 0.75 amax, gaps 2^-1 amax */
    }
}

START_TEST(round_trip_within_block_error)
{
    tu_rng r = {0x1234};
    enum { N = 1024 };
    static float x[N], y[N];
    static uint8_t q[N / 32 * 34];
    for (int it = 0; it < tu_iters(40); it++) {
        float spread = ldexpf(1.0f, (int)tu_below(&r, 31) - 20); /* values stay in fp16 range */
        tu_fill(&r, x, N, spread, it % 2);
        for (int i = 0; i < N_TYPES; i++) {
            quant_ggml_type t = block_types[i];
            quant_error err;
            ck_assert_int_eq(quant_ggml_quantize(NULL, t, x, 1, N, NULL, q, &err), QUANT_OK);
            ck_assert_int_eq(quant_ggml_dequantize(NULL, t, q, 1, N, y, &err), QUANT_OK);
            for (int j = 0; j < N; j++) {
                const float *blk = x + j / 32 * 32, *super = x + j / 256 * 256;
                float bound = expressible_error(t, blk, t == QUANT_GGML_IQ4_XS ? super : NULL);
                ck_assert_msg(fabsf(x[j] - y[j]) <= bound, "%s: value %d: %g back as %g (bound %g)",
                              quant_ggml_traits_get(t)->name, j, (double)x[j], (double)y[j],
                              (double)bound);
            }
        }
    }
}
END_TEST

/* All-zero blocks dequantize to zeros with and without importance, in ggml's bytes. */
START_TEST(zero_blocks)
{
    float x[512] = {0}, w[512], y[512];
    uint8_t q[512 / 32 * 34];
    for (int j = 0; j < 512; j++) w[j] = (float)(j % 5);
    for (int j = 256; j < 512; j++) x[j] = (float)(j % 9) - 4.0f; /* a nonzero half beside */
    for (int i = 0; i < N_TYPES; i++) {
        quant_ggml_type t = block_types[i];
        for (int with = 0; with < 2; with++) {
            quant_error err;
            ck_assert_int_eq(quant_ggml_quantize(NULL, t, x, 1, 512, with ? w : NULL, q, &err),
                             QUANT_OK);
            ck_assert_int_eq(quant_ggml_dequantize(NULL, t, q, 1, 512, y, &err), QUANT_OK);
            for (int j = 0; j < 256; j++) ck_assert_float_eq(y[j], 0.0f);
        }
    }
    /* ggml's bytes for a zero block: q4_0 d = -0 (0x8000) and codes 8; q5_0 codes 16 (qh all
     * ones); q8_0, q4_1 and mxfp4 all zero; iq4_nl d 0 and level index 8 */
    static const struct {
        quant_ggml_type t;
        size_t head_len; /* scale bytes (and q5_0's qh) */
        uint8_t head[6];
        uint8_t fill; /* every code byte */
    } zero[] = {
        {QUANT_GGML_Q4_0, 2, {0x00, 0x80}, 0x88},
        {QUANT_GGML_Q5_0, 6, {0x00, 0x80, 0xff, 0xff, 0xff, 0xff}, 0x00},
        {QUANT_GGML_Q8_0, 2, {0}, 0x00},
        {QUANT_GGML_Q4_1, 4, {0}, 0x00},
        {QUANT_GGML_MXFP4, 1, {0}, 0x00},
        {QUANT_GGML_IQ4_NL, 2, {0}, 0x88},
    };
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++) {
        const quant_ggml_traits *t = quant_ggml_traits_get(zero[i].t);
        quant_error err;
        ck_assert_int_eq(quant_ggml_quantize(NULL, t->type, x, 1, 32, NULL, q, &err), QUANT_OK);
        ck_assert_msg(!memcmp(q, zero[i].head, zero[i].head_len), "%s: zero block scale bytes",
                      t->name);
        for (size_t k = zero[i].head_len; k < t->block_bytes; k++)
            ck_assert_msg(q[k] == zero[i].fill, "%s: zero block byte %zu is %02x", t->name, k,
                          q[k]);
    }
}
END_TEST

START_TEST(refusals)
{
    float x[300] = {0}, w[300], y[300];
    uint8_t q[300 * 2];
    for (int j = 0; j < 300; j++) w[j] = 1.0f;
    quant_error err;
    for (int i = 0; i < N_TYPES; i++) {
        const quant_ggml_traits *t = quant_ggml_traits_get(block_types[i]);
        int64_t bad = t->block == 256 ? 288 : 48;
        ck_assert_int_eq(quant_ggml_quantize(NULL, t->type, x, 1, bad, NULL, q, &err),
                         QUANT_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(err.message, t->name));
        char len[32];
        snprintf(len, sizeof len, "%lld", (long long)bad);
        ck_assert_ptr_nonnull(strstr(err.message, len));
        ck_assert_int_eq(quant_ggml_dequantize(NULL, t->type, q, 1, bad, y, &err), QUANT_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(err.message, t->name));
        ck_assert(isnan(quant_ggml_row_error(t->type, x, bad, NULL)));
        /* NaN and Inf in the values, NaN, Inf and negative importance */
        int64_t n = t->block;
        x[5] = NAN;
        ck_assert_int_eq(quant_ggml_quantize(NULL, t->type, x, 1, n, NULL, q, &err),
                         QUANT_ERR_NONFINITE);
        ck_assert_ptr_nonnull(strstr(err.message, "column 5"));
        x[5] = -INFINITY;
        ck_assert_int_eq(quant_ggml_quantize(NULL, t->type, x, 1, n, NULL, q, &err),
                         QUANT_ERR_NONFINITE);
        x[5] = 0.0f;
        const float bad_w[3] = {NAN, INFINITY, -1.0f};
        for (int k = 0; k < 3; k++) {
            w[7] = bad_w[k];
            ck_assert_int_eq(quant_ggml_quantize(NULL, t->type, x, 1, n, w, q, &err),
                             QUANT_ERR_NONFINITE);
            ck_assert_ptr_nonnull(strstr(err.message, "importance"));
        }
        w[7] = 1.0f;
        ck_assert_int_eq(quant_ggml_quantize(NULL, t->type, x, 1, n, w, q, &err), QUANT_OK);
    }
}
END_TEST

/* The bytes do not depend on the thread count, with or without importance. */
START_TEST(threads_same_bytes)
{
    enum { ROWS = 37, N = 512 };
    tu_rng r = {77};
    float *x = malloc(sizeof(float) * ROWS * N), *w = malloc(sizeof(float) * N);
    uint8_t *one = malloc(ROWS * N / 32 * 34), *many = malloc(ROWS * N / 32 * 34);
    float *y1 = malloc(sizeof(float) * ROWS * N), *yn = malloc(sizeof(float) * ROWS * N);
    ck_assert(x && w && one && many && y1 && yn);
    tu_fill(&r, x, ROWS * N, 2.0f, 1);
    for (int j = 0; j < N; j++) w[j] = (float)tu_below(&r, 1000) / 100.0f;
    for (int i = 0; i < N_TYPES; i++) {
        const quant_ggml_traits *t = quant_ggml_traits_get(block_types[i]);
        int64_t rb = quant_ggml_row_bytes(t->type, N);
        for (int with = 0; with < 2; with++) {
            const float *imp = with ? w : NULL;
            for (int row = 0; row < ROWS; row++)
                t->quantize_row(x + row * N, one + row * rb, N, imp);
            for (int row = 0; row < ROWS; row++) t->dequantize_row(one + row * rb, y1 + row * N, N);
            for (int threads = 1; threads <= 3; threads++) {
                quant_ctx *ctx = tu_ctx(QUANT_ISA_SCALAR, threads);
                quant_error err;
                memset(many, 0xa5, (size_t)(ROWS * rb));
                ck_assert_int_eq(quant_ggml_quantize(ctx, t->type, x, ROWS, N, imp, many, &err),
                                 QUANT_OK);
                ck_assert_msg(!memcmp(one, many, (size_t)(ROWS * rb)), "%s, %d threads", t->name,
                              threads);
                ck_assert_int_eq(quant_ggml_dequantize(ctx, t->type, many, ROWS, N, yn, &err),
                                 QUANT_OK);
                ck_assert(!memcmp(y1, yn, sizeof(float) * ROWS * N));
                quant_ctx_free(ctx);
            }
        }
    }
    free(x), free(w), free(one), free(many), free(y1), free(yn);
}
END_TEST

static uint8_t mxfp4_exponent_of(float amax)
{
    float x[32] = {0};
    uint8_t q[17];
    x[9] = -amax;
    quant_error err;
    ck_assert_int_eq(quant_ggml_quantize(NULL, QUANT_GGML_MXFP4, x, 1, 32, NULL, q, &err),
                     QUANT_OK);
    return q[0];
}

/* mxfp4's scale byte: ggml's floor(log2f(amax)) - 2 + 127, next to every power of two; below
 * 2^-125 the smallest scale (e 0); never 0xff. */
START_TEST(mxfp4_scale_extremes)
{
    for (int k = -125; k <= 127; k++) {
        float p = ldexpf(1.0f, k);
        float a = p;
        for (int s = 0; s < 40; s++, a = nextafterf(a, 0.0f)) {
            int want = (int)floorf(log2f(a)) - 2 + 127;
            ck_assert_msg(mxfp4_exponent_of(a) == want, "amax %a: e %d, ggml %d", (double)a,
                          mxfp4_exponent_of(a), want);
        }
        ck_assert_int_eq(mxfp4_exponent_of(nextafterf(p, INFINITY)), k - 2 + 127);
    }
    ck_assert_int_eq(mxfp4_exponent_of(FLT_MAX), 253);
    ck_assert_int_eq(mxfp4_exponent_of(ldexpf(1.0f, -125)), 0);
    ck_assert_int_eq(mxfp4_exponent_of(nextafterf(ldexpf(1.0f, -125), 0.0f)), 0);
    ck_assert_int_eq(mxfp4_exponent_of(FLT_MIN), 0);
    ck_assert_int_eq(mxfp4_exponent_of(ldexpf(1.0f, -149)), 0);
    /* a subnormal block keeps its values to the nearest multiple of 2^-128 */
    float x[32] = {0}, y[32];
    uint8_t q[17];
    x[0] = ldexpf(3.0f, -128);
    x[1] = ldexpf(-5.0f, -130);
    quant_error err;
    ck_assert_int_eq(quant_ggml_quantize(NULL, QUANT_GGML_MXFP4, x, 1, 32, NULL, q, &err),
                     QUANT_OK);
    ck_assert_int_eq(quant_ggml_dequantize(NULL, QUANT_GGML_MXFP4, q, 1, 32, y, &err), QUANT_OK);
    ck_assert_float_eq(y[0], x[0]);
    ck_assert_float_eq(y[1], ldexpf(-1.0f, -128));
    /* the largest floats stay finite */
    for (int j = 0; j < 32; j++) x[j] = j % 2 ? FLT_MAX : -FLT_MAX / 3;
    ck_assert_int_eq(quant_ggml_quantize(NULL, QUANT_GGML_MXFP4, x, 1, 32, NULL, q, &err),
                     QUANT_OK);
    ck_assert_int_eq(quant_ggml_dequantize(NULL, QUANT_GGML_MXFP4, q, 1, 32, y, &err), QUANT_OK);
    for (int j = 0; j < 32; j++) ck_assert(isfinite(y[j]));
}
END_TEST

/* A legacy block whose scale's reciprocal overflows (max below about 2^-125): its fp16 scale
 * is 0, its codes 0, and it dequantizes to zeros. */
START_TEST(legacy_tiny_blocks)
{
    float x[32], y[32];
    uint8_t q[34];
    for (int j = 0; j < 32; j++) x[j] = ldexpf((float)(j - 16), -140);
    static const quant_ggml_type legacy[5] = {QUANT_GGML_Q8_0, QUANT_GGML_Q4_0, QUANT_GGML_Q4_1,
                                              QUANT_GGML_Q5_0, QUANT_GGML_Q5_1};
    for (int i = 0; i < 5; i++) {
        const quant_ggml_traits *t = quant_ggml_traits_get(legacy[i]);
        quant_error err;
        ck_assert_int_eq(quant_ggml_quantize(NULL, t->type, x, 1, 32, NULL, q, &err), QUANT_OK);
        ck_assert_int_eq(q[0] | (q[1] & 0x7f), 0);
        size_t codes = t->block_bytes - 16;
        for (size_t k = codes; k < t->block_bytes; k++) ck_assert_int_eq(q[k], 0);
        ck_assert_int_eq(quant_ggml_dequantize(NULL, t->type, q, 1, 32, y, &err), QUANT_OK);
        for (int j = 0; j < 32; j++) ck_assert_float_eq(y[j], 0.0f);
    }
}
END_TEST

Suite *suite_ggml_legacy(void)
{
    Suite *s = suite_create("ggml_legacy");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, traits_rows);
    tcase_add_test(tc, golden_bytes);
    tcase_add_test(tc, golden_weighted_error);
    tcase_add_test(tc, golden_weighted_error_shapes);
    tcase_add_test(tc, golden_dequantize);
    tcase_add_test(tc, dequantize_by_hand);
    tcase_add_test(tc, round_trip_within_block_error);
    tcase_add_test(tc, zero_blocks);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, threads_same_bytes);
    tcase_add_test(tc, mxfp4_scale_extremes);
    tcase_add_test(tc, legacy_tiny_blocks);
    suite_add_tcase(s, tc);
    return s;
}
