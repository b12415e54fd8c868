/* test_ggml_kquants.c -- ggml's K-quant blocks q2_k..q6_k (ggml_kquants.c) against answers ggml
 * itself gave: the bytes of its file quantizer for a fixed row without and with importance, its
 * to_float of fixed blocks, and its importance-weighted errors on a longer fixed row (ours must
 * not exceed them); plus properties: zero super-blocks, tiny and large values, super-blocks
 * independent of their neighbours, the same bytes on every call.
 * The fixed rows come from an integer hash, so they are the same floats on every compiler.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../testutil.h"
#include "../../../lib/quant/ggml_blocks.h"

#define QK 256

/* ---- ggml's answers ------------------------------------------------------------------------ */

static const char q2_k_ref_hex[] =
    "240b0000f8b82333327b22ef2212e7437071b331717141317150f13171b2707170a0406020f070a2a060b060"
    "6060a0a0d4cac2ddefe6cdcaf7ded9d7ca16f7e6a599e1a5c969a5c5e5e569e54d942789463d4640";
static const char q2_k_imp_hex[] =
    "140c0000f9b82333327c12ff2212ec43b070b33170b140317150f03071b17071b0a040a020f070b2a0b0b0a0"
    "6060a0a0a48b8299aba28986b39b99938a12b3a2a999e1e9c969a9c9e9e969e58d982b89d13c4740";
static const char q3_k_ref_hex[] =
    "85bd94adfdc4a9acd4b9a59dad04ddccad6d91bdf13d35fcb9bd3d9d75f12979c140c08000c34083c3110040"
    "00c301431000c0003090d0403000500080b070303c04041a2a1f0d073e3c3a3d072a3a2b03c364207490c070"
    "6041e06cfc0210f0bc77c000d73d769a52b31a46f9b4";
static const char q3_k_imp_hex[] =
    "85bd942dfdc4a9acd4b9a59dad04ddccad6d91bdf13d35fcb9bd3d9575f12979c140c08000c35083c3610080"
    "00c301431000c00030d0d040300090c040b0b0303c1414d92a1f1d073e3c3a3d072e3a2b03c3642074d0c070"
    "6051e068ec0220f0ca55c040d13fa59c52b31a4679b5";
static const char q4_k_ref_hex[] =
    "062c0b38a2c0288f46c03fcddebf78c300010802010301030300010102030002010101020201020f01020302"
    "030102039c5bad3c6c8e603d8d64ee4c7c9d7d6d6e7c536c0bbf6e8e7b6eae6d3c4bab8b7385758486758485"
    "768584758574767576860574a575757575748445f6707f85f6f0f0c2fae9c0d0ddd5d5d5c003cddaded7fbeb"
    "f1cddef2fbfeccfbc2e7acd1";
static const char q4_k_imp_hex[] =
    "fa2b1138a2c0298f46c03fcddfbf78c400010802010301030300010102030002010101020201020f01020302"
    "030102039c5bac4c6c8e603d8c64fe4b8c9d7d6d6e7c637c0bcf6e8e7b6dae6d3c4bab8b7385758486759485"
    "769584758574767576860574a585747575748445f6707f85f6e0f0c2fae9c0d0ded6d5d5c003cddadfd7fbeb"
    "f1cddef2fcfeccfbc2d7acd1";
static const char q5_k_ref_hex[] =
    "c2270538a2c0288f46c03fcedfcf78d48ca48da4e4cca0a4cca0ac84ac0cc4c4c4acc0c4a4ecc48dc4c4ecc4"
    "a484dcac01020104020502050600030203060005010202050502050f030406040601050538b75a89e92dd07b"
    "2ad8fd980a4bfbdbed08c6e9079fdd2cf7ec5deb8a975717f61aea181cfa2709fc2a18fb19f9ecfafd1d0ae9"
    "490be9fbfaf81989fde0ff1aece1e194f5d290b0acbbaba990059ba5bebfe7d7f19bbdf4e8ec98e794ce48b2";
static const char q5_k_imp_hex[] =
    "c5270738e2c0298f46c03fced0cf78d48ca48da4e4cca0a4cca0ac84ac0cc4c4c4acc0c4a4ecc48dc4c4ecc4"
    "a484dcac01020104020502050600030203060005010202050502050f030406040601050538b75988e82cd07a"
    "29d8fc97094afbdbec08c6e8069edd2cf7eb5cea89975716f61aea171cf92709fc2a18fb19f8ecf9fd1d0ae9"
    "490be9fbfaf81989fce0fe1aece1e194f5d290b0acbbaba990059ba5cebfe7d7f19bbdf4e8ec98e794ce48b2";
static const char q6_k_ref_hex[] =
    "e5d101eef13a031b0aa630d2ff18272c52d101eebe815e41c03f4d1ffdb2cebd909050f030b06020b04000d0"
    "e0600060d010a0e01030b050e0e0b0c00030b030a03f3eadec8b2c0ac09f925518d4adec0c0ce0e2c17f127f"
    "d034c2e16c10b0b0382d20c63414defbe2efe4e4df10d7eceea3802cb940adaf9e8e52806fed1eb252926091"
    "926182e1618222925161a2a16292425111e261a05261a161515291919489814caea54c49775d5d5649057261"
    "45698286ba4946b586864a867d67047a3c770000809e1ce3e675f187f10f81dbf69f";
static const char q6_k_imp_hex[] =
    "e5d100eef13a031a0aa730d2ff18272c52d101eebe815e41c03f4d1ffdb2bebd909050f030b06010b04010c0"
    "e0600060d01090e00030b050e0d0c0c00030b030a03f3eadec8b2c0ac09f925518d4adec0c0ce0e2c17f127f"
    "d034c2e16c10b0b0382d20c63414defbe2efe4e4de10d7eceea3812cb940adaf9e8e42816eed0ea252926091"
    "926182e1618222925161a2a16292425111e261a05261a161515291919489814caea54c49775d5d5649057261"
    "45698286ba4946b586864a867d67047a3a770000809f1de4e675f184f10f81dcf89f";

typedef struct ktype {
    const char *name;
    size_t bytes;
    quant_ggml_quantize_fn quantize;
    quant_ggml_dequantize_fn dequantize;
    int f16_at[2];       /* offsets of the fp16 super-block scales (-1: none) */
    const char *ref_hex; /* ggml's bytes for fixed_row(1, .), no importance */
    const char *imp_hex; /* with importance fixed_importance(2, .) */
    uint64_t deq_fnv;    /* FNV-1a of ggml's to_float bits for fixed_block() */
    float deq_first, deq_last;
    double err_ref, err_imp; /* ggml's errors for fixed_row(7, .) of 1024 values */
    uint64_t many_fnv[2];    /* FNV-1a of ggml's bytes for many_row() 100..147 (no imp., imp.) */
} ktype;

static const ktype ktypes[] = {
    {.name = "q2_k",
     .bytes = 84,
     .quantize = qg_quantize_q2_k,
     .dequantize = qg_dequantize_q2_k,
     .f16_at = {80, 82},
     .ref_hex = q2_k_ref_hex,
     .imp_hex = q2_k_imp_hex,
     .deq_fnv = 0xe87e56f3a775e49full,
     .deq_first = 0x1.c6bp-1f,
     .deq_last = 0x1.5384p+1f,
     .err_ref = 3668.1569628751022,
     .err_imp = 2702.5588190171225,
     .many_fnv = {0x4dc6f2a8f2adddaeull, 0x5536e71a3b8a40fdull}},
    {.name = "q3_k",
     .bytes = 110,
     .quantize = qg_quantize_q3_k,
     .dequantize = qg_dequantize_q3_k,
     .f16_at = {108, -1},
     .ref_hex = q3_k_ref_hex,
     .imp_hex = q3_k_imp_hex,
     .deq_fnv = 0x2563146b76c35b6full,
     .deq_first = 0x1.998p-2f,
     .deq_last = -0x1.ccbp+0f,
     .err_ref = 1324.0843649632429,
     .err_imp = 1772.6569686854339,
     .many_fnv = {0x1694e1b784a2b136ull, 0x4501afa0d12a47f4ull}},
    {.name = "q4_k",
     .bytes = 144,
     .quantize = qg_quantize_q4_k,
     .dequantize = qg_dequantize_q4_k,
     .f16_at = {0, 2},
     .ref_hex = q4_k_ref_hex,
     .imp_hex = q4_k_imp_hex,
     .deq_fnv = 0x5e98944e193240feull,
     .deq_first = 0x1.0b8cp+4f,
     .deq_last = 0x1.38aap+6f,
     .err_ref = 240.52840784868289,
     .err_imp = 378.75814316818503,
     .many_fnv = {0xf2866e4d6abe4f17ull, 0xf1267c504bf5f3d8ull}},
    {.name = "q5_k",
     .bytes = 176,
     .quantize = qg_quantize_q5_k,
     .dequantize = qg_dequantize_q5_k,
     .f16_at = {0, 2},
     .ref_hex = q5_k_ref_hex,
     .imp_hex = q5_k_imp_hex,
     .deq_fnv = 0xfe6ee8c02c8656eaull,
     .deq_first = 0x1.1cbep+4f,
     .deq_last = 0x1.3e47bp+7f,
     .err_ref = 59.284997654347258,
     .err_imp = 94.016858395574431,
     .many_fnv = {0x87b7e17e5829b34dull, 0xa389205f5566cb20ull}},
    {.name = "q6_k",
     .bytes = 210,
     .quantize = qg_quantize_q6_k,
     .dequantize = qg_dequantize_q6_k,
     .f16_at = {208, -1},
     .ref_hex = q6_k_ref_hex,
     .imp_hex = q6_k_imp_hex,
     .deq_fnv = 0x2aa6858e6d21e29bull,
     .deq_first = 0x1.531ep+3f,
     .deq_last = -0x1.cde32p+7f,
     .err_ref = 16.324731162197825,
     .err_imp = 28.597398717124889,
     .many_fnv = {0xd4ec18c7c580db3eull, 0x98218fd6266c8e5full}},
};

#define N_KTYPES ((int)(sizeof ktypes / sizeof ktypes[0]))

/* ---- the fixed inputs ---------------------------------------------------------------------- */

static uint32_t fixed_hash(uint32_t v)
{
    v ^= v >> 16;
    v *= 0x7feb352du;
    v ^= v >> 15;
    v *= 0x846ca68bu;
    v ^= v >> 16;
    return v;
}

/* Uniform in [-4, 4] by steps of 1/2500, one in 16 times 8 (a tail); values 32..63 of every
 * super-block are 0 (whole zero sub-blocks for every type). */
static float fixed_value(uint32_t seed, int i)
{
    uint32_t h = fixed_hash(seed * 0x9e3779b9u + (uint32_t)i);
    if (i % QK >= 32 && i % QK < 64) return 0.0f;
    float v = (float)((int32_t)(h % 20001u) - 10000) / 2500.0f;
    return (h >> 28) == 0 ? v * 8.0f : v;
}

/* 0 one time in 8, else in (0, 4]. */
static float fixed_importance(uint32_t seed, int j)
{
    uint32_t h = fixed_hash(seed * 0x85ebca6bu + (uint32_t)j);
    return (h & 7) == 0 ? 0.0f : (float)(h % 1000u + 1u) / 250.0f;
}

/* Hashed bytes with the fp16 scales set to 0x2e66 (about 0.1) and 0x1c00 (2^-8). */
static void fixed_block(const ktype *k, int t, uint8_t *blk)
{
    for (size_t i = 0; i < k->bytes; i++)
        blk[i] = (uint8_t)fixed_hash(3000u + (uint32_t)t * 977u + (uint32_t)i);
    static const uint8_t f16[2][2] = {{0x66, 0x2e}, {0x00, 0x1c}};
    for (int s = 0; s < 2; s++)
        if (k->f16_at[s] >= 0) memcpy(blk + k->f16_at[s], f16[s], 2);
}

/* Row `seed` of the wide check: fixed_value shifted by 3, -1.5 or 0 and scaled by a power of
 * two in 2^-8..2^7, with fixed_importance(seed + 1000, .). */
static void many_row(uint32_t seed, float *x, float *w, int n)
{
    float scale = ldexpf(1.0f, (int)(seed % 16) - 8);
    float shift = seed % 3 == 0 ? 3.0f : seed % 3 == 1 ? -1.5f : 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = (fixed_value(seed, i) + shift) * scale;
        w[i] = fixed_importance(seed + 1000u, i);
    }
}

static void from_hex(const char *hex, uint8_t *out, size_t n)
{
    ck_assert_uint_eq(strlen(hex), 2 * n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

static uint64_t fnv_bits(const float *y, int n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) {
            h ^= (qn_bits(y[i]) >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    return h;
}

/* sum_j w_j (x_j - y_j)^2 in float64, index order (quant_ggml_row_error's figure). */
static double row_error(const ktype *k, const float *x, int n, const float *w)
{
    uint8_t *q = malloc(k->bytes * (size_t)(n / QK));
    float *y = malloc(sizeof *y * (size_t)n);
    ck_assert_ptr_nonnull(q);
    ck_assert_ptr_nonnull(y);
    k->quantize(x, q, n, w);
    k->dequantize(q, y, n);
    double e = 0;
    for (int j = 0; j < n; j++) {
        double d = (double)x[j] - (double)y[j];
        e += (w ? (double)w[j] : 1.0) * d * d;
    }
    free(q);
    free(y);
    return e;
}

/* ---- golden ------------------------------------------------------------------------------- */

START_TEST(golden_bytes_as_ggml)
{
    float x[QK], w[QK];
    for (int i = 0; i < QK; i++) {
        x[i] = fixed_value(1, i);
        w[i] = fixed_importance(2, i);
    }
    for (int t = 0; t < N_KTYPES; t++) {
        const ktype *k = &ktypes[t];
        uint8_t want[210], got[210];
        from_hex(k->ref_hex, want, k->bytes);
        k->quantize(x, got, QK, NULL);
        ck_assert_msg(!memcmp(want, got, k->bytes), "%s: bytes without importance", k->name);
        from_hex(k->imp_hex, want, k->bytes);
        k->quantize(x, got, QK, w);
        ck_assert_msg(!memcmp(want, got, k->bytes), "%s: bytes with importance", k->name);
    }
}
END_TEST

/* 48 rows of 4 super-blocks, hashed: ggml's bytes on a wider sample than the one above. */
START_TEST(golden_many_rows_as_ggml)
{
    enum { N = 4 * QK };
    float x[N], w[N];
    uint8_t q[4 * 210];
    for (int t = 0; t < N_KTYPES; t++) {
        const ktype *k = &ktypes[t];
        uint64_t h[2] = {0xcbf29ce484222325ull, 0xcbf29ce484222325ull};
        for (uint32_t seed = 100; seed < 148; seed++) {
            many_row(seed, x, w, N);
            for (int m = 0; m < 2; m++) {
                k->quantize(x, q, N, m ? w : NULL);
                for (size_t i = 0; i < 4 * k->bytes; i++) {
                    h[m] ^= q[i];
                    h[m] *= 0x100000001b3ull;
                }
            }
        }
        ck_assert_msg(h[0] == k->many_fnv[0], "%s: bytes without importance", k->name);
        ck_assert_msg(h[1] == k->many_fnv[1], "%s: bytes with importance", k->name);
    }
}
END_TEST

START_TEST(golden_dequantize_as_ggml)
{
    for (int t = 0; t < N_KTYPES; t++) {
        const ktype *k = &ktypes[t];
        uint8_t blk[210];
        float y[QK];
        fixed_block(k, t, blk);
        k->dequantize(blk, y, QK);
        ck_assert_msg(qn_bits(y[0]) == qn_bits(k->deq_first), "%s: y[0] %a", k->name, (double)y[0]);
        ck_assert_msg(qn_bits(y[QK - 1]) == qn_bits(k->deq_last), "%s: y[255] %a", k->name,
                      (double)y[QK - 1]);
        ck_assert_msg(fnv_bits(y, QK) == k->deq_fnv, "%s: dequantized bits", k->name);
    }
}
END_TEST

START_TEST(golden_errors_not_above_ggml)
{
    enum { N = 4 * QK };
    float x[N], w[N];
    for (int i = 0; i < N; i++) {
        x[i] = fixed_value(7, i);
        w[i] = fixed_importance(8, i);
    }
    for (int t = 0; t < N_KTYPES; t++) {
        const ktype *k = &ktypes[t];
        double e = row_error(k, x, N, NULL), ew = row_error(k, x, N, w);
        ck_assert_msg(e <= k->err_ref, "%s: error %.17g above ggml's %.17g", k->name, e,
                      k->err_ref);
        ck_assert_msg(ew <= k->err_imp, "%s: weighted error %.17g above ggml's %.17g", k->name, ew,
                      k->err_imp);
    }
}
END_TEST

/* ---- properties ---------------------------------------------------------------------------- */

/* Super-blocks 0 and 2 zero (+0 and -0), 1 random: the zero ones are zero bytes and decode to
 * zeros, with and without importance. */
START_TEST(zero_superblocks)
{
    tu_rng r = {.s = 11};
    float x[3 * QK], w[3 * QK], y[3 * QK];
    for (int i = 0; i < 3 * QK; i++) {
        x[i] = i < QK ? 0.0f : i < 2 * QK ? tu_normal(&r, 1.0f) : -0.0f;
        w[i] = (float)tu_below(&r, 100) / 10.0f;
    }
    uint8_t zero[210] = {0};
    for (int t = 0; t < N_KTYPES; t++) {
        const ktype *k = &ktypes[t];
        uint8_t q[3 * 210];
        for (int m = 0; m < 2; m++) {
            k->quantize(x, q, 3 * QK, m ? w : NULL);
            ck_assert_msg(!memcmp(q, zero, k->bytes), "%s: block 0", k->name);
            ck_assert_msg(!memcmp(q + 2 * k->bytes, zero, k->bytes), "%s: block 2", k->name);
            k->dequantize(q, y, 3 * QK);
            for (int i = 0; i < QK; i++) {
                ck_assert_msg(y[i] == 0.0f && y[2 * QK + i] == 0.0f, "%s: value %d", k->name, i);
                ck_assert(isfinite(y[QK + i]));
            }
        }
    }
}
END_TEST

/* Rows far below GROUP_MAX_EPS or whose scales vanish in fp16 decode to zeros; rows up to
 * 6e4 keep finite scales and an error below the signal's. */
START_TEST(extreme_values)
{
    tu_rng r = {.s = 12};
    float x[2 * QK], w[2 * QK], y[2 * QK];
    uint8_t q[2 * 210];
    for (int t = 0; t < N_KTYPES; t++) {
        const ktype *k = &ktypes[t];
        for (int i = 0; i < 2 * QK; i++) {
            x[i] = tu_normal(&r, 1e-20f);
            w[i] = 1.0f + (float)tu_below(&r, 4);
        }
        k->quantize(x, q, 2 * QK, NULL);
        k->dequantize(q, y, 2 * QK);
        for (int i = 0; i < 2 * QK; i++) ck_assert_msg(y[i] == 0.0f, "%s: tiny %d", k->name, i);
        for (int i = 0; i < 2 * QK; i++) {
            float s = tu_normal(&r, 1.0f);
            x[i] = s > 0 ? fminf(s * 2e4f, 6e4f) : fmaxf(s * 2e4f, -6e4f);
        }
        x[5] = 6e4f;
        x[QK + 7] = -6e4f;
        for (int m = 0; m < 2; m++) {
            const float *imp = m ? w : NULL;
            k->quantize(x, q, 2 * QK, imp);
            k->dequantize(q, y, 2 * QK);
            double e = 0, e0 = 0;
            for (int i = 0; i < 2 * QK; i++) {
                ck_assert_msg(isfinite(y[i]), "%s: large %d", k->name, i);
                double d = (double)x[i] - y[i], wi = imp ? imp[i] : 1.0;
                e += wi * d * d;
                e0 += wi * (double)x[i] * x[i];
            }
            ck_assert_msg(e < 0.5 * e0, "%s: error %g of %g", k->name, e, e0);
        }
    }
}
END_TEST

/* Every super-block is quantized alone (with its slice of the importance), and twice the same
 * row gives the same bytes. */
START_TEST(superblocks_independent_and_repeatable)
{
    tu_rng r = {.s = 13};
    enum { MAXB = 6 };
    float x[MAXB * QK], w[MAXB * QK];
    uint8_t a[MAXB * 210], b[MAXB * 210], one[210];
    for (int it = 0; it < tu_iters(40); it++) {
        int nb = 1 + (int)tu_below(&r, MAXB), n = nb * QK;
        tu_fill(&r, x, n, (float)(1 + tu_below(&r, 100)), (int)tu_below(&r, 2));
        for (int i = 0; i < n; i++) w[i] = tu_below(&r, 5) ? (float)tu_below(&r, 1000) : 0.0f;
        for (int t = 0; t < N_KTYPES; t++) {
            const ktype *k = &ktypes[t];
            for (int m = 0; m < 2; m++) {
                const float *imp = m ? w : NULL;
                k->quantize(x, a, n, imp);
                k->quantize(x, b, n, imp);
                ck_assert_msg(!memcmp(a, b, k->bytes * (size_t)nb), "%s: repeat", k->name);
                for (int s = 0; s < nb; s++) {
                    k->quantize(x + s * QK, one, QK, imp ? imp + s * QK : NULL);
                    ck_assert_msg(!memcmp(a + k->bytes * (size_t)s, one, k->bytes),
                                  "%s: block %d of %d", k->name, s, nb);
                }
            }
        }
    }
}
END_TEST

/* Gaussian rows: the weighted error stays below the weighted signal and the decoded values
 * stay within 1.25 x the super-block's largest |x| (every type has room for its extremes). */
START_TEST(gaussian_rows_bounded)
{
    tu_rng r = {.s = 14};
    float x[4 * QK], w[4 * QK], y[4 * QK];
    uint8_t q[4 * 210];
    for (int it = 0; it < tu_iters(30); it++) {
        float spread = ldexpf(1.0f, (int)tu_below(&r, 20) - 10);
        for (int i = 0; i < 4 * QK; i++) {
            x[i] = tu_normal(&r, spread);
            w[i] = (float)(1 + tu_below(&r, 50));
        }
        for (int t = 0; t < N_KTYPES; t++) {
            const ktype *k = &ktypes[t];
            for (int m = 0; m < 2; m++) {
                k->quantize(x, q, 4 * QK, m ? w : NULL);
                k->dequantize(q, y, 4 * QK);
                double e = 0, e0 = 0;
                for (int i = 0; i < 4 * QK; i++) {
                    double d = (double)x[i] - y[i], wi = m ? w[i] : 1.0;
                    e += wi * d * d;
                    e0 += wi * (double)x[i] * x[i];
                }
                ck_assert_msg(e < e0, "%s: error %g of %g", k->name, e, e0);
                for (int s = 0; s < 4; s++) {
                    float amax = 0, ymax = 0;
                    for (int i = s * QK; i < (s + 1) * QK; i++) {
                        amax = fmaxf(amax, fabsf(x[i]));
                        ymax = fmaxf(ymax, fabsf(y[i]));
                    }
                    ck_assert_msg(ymax <= 1.25f * amax, "%s: %g beyond %g", k->name, (double)ymax,
                                  (double)amax);
                }
            }
        }
    }
}
END_TEST

Suite *suite_ggml_kquants(void)
{
    Suite *s = suite_create("ggml_kquants");
    TCase *tc = tcase_create("ggml_kquants");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, golden_bytes_as_ggml);
    tcase_add_test(tc, golden_many_rows_as_ggml);
    tcase_add_test(tc, golden_dequantize_as_ggml);
    tcase_add_test(tc, golden_errors_not_above_ggml);
    tcase_add_test(tc, zero_superblocks);
    tcase_add_test(tc, extreme_values);
    tcase_add_test(tc, superblocks_independent_and_repeatable);
    tcase_add_test(tc, gaussian_rows_bounded);
    suite_add_tcase(s, tc);
    return s;
}
