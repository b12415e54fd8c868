/* test_errq.c -- the quality sums taken straight from the codes: every kernel
 * set's errstats_codes against the three steps it replaces (widen, dequantize, errstats by the
 * generic kernels) on random chunks, and whole quant_quantize_measured / quant_measure_error
 * calls on every ISA and 1-3 threads against those three steps run span by span in the test.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../testutil.h"
#include "internal.h"

/* A random code of kind kc at most `bits` wide (integers), never a NaN or infinite level. */
static void random_code(tu_rng *r, quant_kcode kc, int bits, uint8_t *codes, int64_t j)
{
    switch (kc) {
    case QK_I8:
        ((int8_t *)codes)[j] = (int8_t)((int64_t)tu_below(r, 1 << bits) - (1 << (bits - 1)));
        break;
    case QK_U8:
        codes[j] = (uint8_t)tu_below(r, 1 << bits);
        break;
    case QK_I16:
        ((int16_t *)codes)[j] = (int16_t)((int64_t)tu_below(r, 65536) - 32768);
        break;
    case QK_NF4:
    case QK_E2M1:
        codes[j] = (uint8_t)tu_below(r, 16);
        break;
    default: { /* fp8: redraw NaN and infinite codes */
        quant_krow kr = {.kcode = kc, .tile = 1, .scale = &(float){1.0f}};
        float v;
        do {
            codes[j] = (uint8_t)tu_below(r, 256);
            quant_generic_dequantize(&kr, codes + j, 1, 0, &v);
        } while (!isfinite(v));
        break;
    }
    }
}

/* A scale per group: ordinary, huge, tiny, or 1 for a group of zeros. */
static float random_scale(tu_rng *r)
{
    switch (tu_below(r, 6)) {
    case 0:
        return ldexpf(1.0f + (float)tu_below(r, 1000) / 1000.0f, 90 + (int)tu_below(r, 30));
    case 1:
        return ldexpf(1.0f + (float)tu_below(r, 1000) / 1000.0f, -120 - (int)tu_below(r, 20));
    case 2:
        return 1.0f;
    default:
        return ldexpf(1.0f + (float)tu_below(r, 1000) / 1000.0f, (int)tu_below(r, 20) - 12);
    }
}

/* The three steps errstats_codes replaces, by the generic kernels. */
static void three_steps(const quant_krow *kr, const void *x, bool bf16, const void *codes,
                        int64_t n, int64_t c0, double acc[3])
{
    static float xw[QUANT_CHUNK * 2], d[QUANT_CHUNK * 2];
    const float *xf = x;
    if (bf16) {
        quant_kernels_generic.widen_bf16(x, xw, n);
        xf = xw;
    }
    quant_generic_dequantize(kr, codes, n, c0, d);
    quant_generic_errstats(xf, d, n, acc);
}

/* Random chunks: every code kind (int4/int8 in bytes, uint4/uint8, int16, fp8, nf4, e2m1),
 * float32 and bf16 inputs, tiles of 1, 8 (declined by AVX-512), 16, 17, 32, 100, 128,
 * 4096 and per-channel, chunk offsets inside a group, lengths with tails of every size, zero
 * points, groups of zeros, huge and tiny scales, prior sums. */
START_TEST(kernels_errstats_codes_equal_three_steps)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {4711};
    enum { MAXN = 9000, MAXG = MAXN + 16 }; /* groups from g0 (0 or 1) on */
    static const int64_t tiles[] = {1, 8, 16, 17, 32, 100, 128, 4096, 1 << 20};
    static float x[MAXN], scale[MAXG];
    static int32_t zp[MAXG];
    static uint16_t xb[MAXN];
    static uint8_t codes[2 * MAXN];
    int served[QUANT_ISA_COUNT] = {0};
    for (int it = 0; it < tu_iters(1500); it++) {
        quant_kcode kc = (quant_kcode)tu_below(&r, QK_COUNT);
        int bits = tu_below(&r, 2) ? 8 : 4;
        int64_t tile = tiles[tu_below(&r, sizeof tiles / sizeof tiles[0])];
        int64_t n = tu_below(&r, 3) ? 1 + tu_below(&r, MAXN) : 16 * (1 + tu_below(&r, MAXN / 16));
        int64_t c0 = tile > MAXN ? tu_below(&r, 3) * QUANT_CHUNK : tu_below(&r, 2 * tile);
        int64_t g0 = c0 / tile, ng = (c0 + n - 1) / tile - g0 + 1;
        bool bf16 = tu_below(&r, 2);
        bool asym = (kc == QK_I8 || kc == QK_U8 || kc == QK_I16) && tu_below(&r, 3) == 0;
        for (int64_t g = 0; g < ng; g++) {
            scale[g0 + g] = random_scale(&r);
            zp[g0 + g] = (int32_t)tu_below(&r, 16) - 8;
        }
        float spread = ldexpf(1.0f, (int)tu_below(&r, 40) - 20);
        for (int64_t j = 0; j < n; j++) {
            random_code(&r, kc, bits, codes, j);
            x[j] = tu_normal(&r, spread);
        }
        if (tu_below(&r, 4) == 0) { /* a group of zeros: codes 0 (or the zero point), scale 1 */
            int64_t g = g0 + tu_below(&r, ng), a = g * tile - c0 > 0 ? g * tile - c0 : 0;
            int64_t b = (g + 1) * tile - c0 < n ? (g + 1) * tile - c0 : n;
            scale[g] = 1.0f;
            for (int64_t j = a; j < b; j++) {
                x[j] = 0.0f;
                if (kc == QK_I16)
                    ((int16_t *)codes)[j] = (int16_t)(asym ? zp[g] : 0);
                else
                    codes[j] = (uint8_t)(asym ? zp[g] : 0);
            }
        }
        for (int64_t j = 0; j < n; j++) xb[j] = quant_f32_to_bf16(x[j]);
        quant_krow kr = {.kcode = kc, .tile = tile, .scale = scale, .zp = asym ? zp : NULL};
        const void *src = bf16 ? (const void *)xb : (const void *)x;
        double prior[3] = {tu_normal(&r, 100.0f), tu_normal(&r, 3.0f), fabs(tu_normal(&r, 0.01f))};
        double want[3] = {prior[0], prior[1], prior[2]};
        three_steps(&kr, src, bf16, codes, n, c0, want);
        for (int k = 0; k < nisa; k++) {
            const quant_kernels *kk = quant_kernels_for(isas[k]);
            if (!kk->errstats_codes) continue;
            double got[3] = {prior[0], prior[1], prior[2]};
            if (kk->errstats_codes(&kr, src, bf16, codes, n, c0, got)) {
                ck_assert_msg(memcmp(got, prior, sizeof got) == 0, "%s declined but wrote sums",
                              quant_isa_name(isas[k]));
                ck_assert_msg(isas[k] != QUANT_ISA_SCALAR, "the generic kernel declined");
                continue;
            }
            served[k]++;
            ck_assert_msg(memcmp(got, want, sizeof got) == 0,
                          "%s kc %d tile %lld c0 %lld n %lld bf16 %d zp %d: %a %a %a, three steps "
                          "%a %a %a",
                          quant_isa_name(isas[k]), kc, (long long)tile, (long long)c0, (long long)n,
                          bf16, asym, got[0], got[1], got[2], want[0], want[1], want[2]);
        }
    }
    /* the generic kernel serves every chunk, the SIMD sets most (AVX2: integer codes only) */
    for (int k = 0; k < nisa; k++)
        if (quant_kernels_for(isas[k])->errstats_codes)
            ck_assert_msg(isas[k] == QUANT_ISA_SCALAR ? served[k] == tu_iters(1500)
                                                      : served[k] > tu_iters(1500) / 4,
                          "%s served %d chunks", quant_isa_name(isas[k]), served[k]);
}
END_TEST

/* The smallest tile other than 1 each kernel set's errstats_codes must serve: its float lanes
 * (the scalar kernel serves every tile). */
static int64_t errq_min_tile(quant_isa isa)
{
    static const int64_t t[QUANT_ISA_COUNT] = {[QUANT_ISA_SCALAR] = 1,
                                               [QUANT_ISA_AVX2] = 8,
                                               [QUANT_ISA_AVX512] = 16,
                                               [QUANT_ISA_NEON] = 4};
    return t[isa];
}

/* One chunk on every kernel set with errstats_codes against the three steps: served when the
 * tile is 1 or at least errq_min_tile, and the same bits. With `nan` (x holds a NaN) the two sums
 * are NaN on both sides and the max must still be the same bits: a NaN error never enters a
 * lane's running max, so the larger error later in that lane counts. */
static void errq_check_chunk(const quant_krow *kr, const void *src, bool bf16, const uint8_t *codes,
                             int64_t n, int64_t c0, bool nan)
{
    double want[3] = {1.0, 2.0, 0.5};
    three_steps(kr, src, bf16, codes, n, c0, want);
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    for (int k = 0; k < nisa; k++) {
        const quant_kernels *kk = quant_kernels_for(isas[k]);
        if (!kk->errstats_codes) continue;
        double got[3] = {1.0, 2.0, 0.5};
        bool must = kr->tile == 1 || kr->tile >= errq_min_tile(isas[k]);
        int declined = kk->errstats_codes(kr, src, bf16, codes, n, c0, got);
        ck_assert_msg(!declined || !must, "%s declined kc %d tile %lld", quant_isa_name(isas[k]),
                      kr->kcode, (long long)kr->tile);
        if (declined) continue;
        bool same = nan ? isnan(got[0]) && isnan(got[1]) && isnan(want[0]) && isnan(want[1]) &&
                              memcmp(got + 2, want + 2, sizeof got[2]) == 0
                        : memcmp(got, want, sizeof got) == 0;
        ck_assert_msg(same,
                      "%s kc %d tile %lld c0 %lld n %lld bf16 %d zp %d nan %d: %a %a %a, three "
                      "steps %a %a %a",
                      quant_isa_name(isas[k]), kr->kcode, (long long)kr->tile, (long long)c0,
                      (long long)n, bf16, kr->zp != NULL, nan, got[0], got[1], got[2], want[0],
                      want[1], want[2]);
    }
}

/* Every integer code kind x float32 / bf16 x zero point or not x tiles 1, 4 (NEON's smallest),
 * 8 (AVX2's), 12, 16 (AVX-512's), 20, 32, 100 and 4096 x chunk starts at, inside and one before
 * a group boundary x lengths of a tail only, a few groups and many, each also with a NaN in x
 * followed by a larger error in its lane. Each lane has its own magnitude (lane l of x about
 * 2^(3l - 10)), so a lane that took another's elements changes the order of the final sums, and
 * each group its own scale, so a lane that took the wrong group changes its error. */
START_TEST(errstats_codes_every_shape_and_nan)
{
    static const quant_kcode kinds[] = {QK_I8, QK_U8, QK_I16};
    static const int64_t tiles[] = {1, 4, 8, 12, 16, 20, 32, 100, 4096};
    static const int64_t lens[] = {5, 203, 1029};
    enum { MAXN = 1029, MAXG = MAXN + 4096 };
    static float x[MAXN], scale[MAXG];
    static int32_t zp[MAXG];
    static uint16_t xb[MAXN];
    static uint8_t codes[2 * MAXN];
    tu_rng r = {77};
    for (int64_t g = 0; g < MAXG; g++) {
        scale[g] = random_scale(&r);
        zp[g] = (int32_t)tu_below(&r, 16) - 8;
    }
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
        for (size_t ti = 0; ti < sizeof tiles / sizeof tiles[0]; ti++)
            for (int at = 0; at < 3; at++)
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                    for (int v = 0; v < 8; v++) { /* bit 0 bf16, bit 1 zero point, bit 2 NaN */
                        int64_t tile = tiles[ti], n = lens[li];
                        int64_t c0 = at == 0 ? 0 : at == 1 ? tile / 2 : tile - 1;
                        bool bf16 = v & 1, nan = v & 4;
                        if (nan && n < 64) continue;
                        for (int64_t j = 0; j < n; j++) {
                            random_code(&r, kinds[ki], 8, codes, j);
                            x[j] = tu_normal(&r, ldexpf(1.0f, 3 * (int)(j % 8) - 10));
                        }
                        if (nan) { /* lane 5 of the fourth group: NaN, then a large error */
                            x[29] = NAN;
                            x[29 + 16] = 1e30f;
                        }
                        for (int64_t j = 0; j < n; j++) xb[j] = quant_f32_to_bf16(x[j]);
                        quant_krow kr = {.kcode = kinds[ki],
                                         .tile = tile,
                                         .scale = scale,
                                         .zp = v & 2 ? zp : NULL};
                        errq_check_chunk(&kr, bf16 ? (const void *)xb : (const void *)x, bf16,
                                         codes, n, c0, nan);
                    }
}
END_TEST

typedef struct ecase {
    quant_qtype qtype;
    const char *method;
    int64_t rows, cols, tile; /* tile 0: per channel */
    quant_dtype dtype;
} ecase;

/* The sums quant_measure_error took before errstats_codes: per work item, row by row, chunk by
 * chunk, the codes unpacked and dequantized and the input widened by the generic kernels. */
static void reference_sums(const ecase *c, const quant_how *how, const quant_tensor *t,
                           const uint8_t *q, const float *scale, const int32_t *zp,
                           quant_error_stats *out)
{
    quant_plan p;
    quant_error err;
    int64_t shape[2] = {c->rows, c->cols};
    ck_assert_int_eq(quant_plan_make(how, 2, shape, &p, &err), QUANT_OK);
    int64_t per = quant_rows_per_item(&p), items = (p.nrows + per - 1) / per;
    double *partial = calloc((size_t)items * 3, sizeof *partial);
    static float xs[QUANT_CHUNK], ds[QUANT_CHUNK];
    static uint8_t codes[QUANT_CHUNK];
    for (int64_t row = 0; row < p.nrows; row++)
        for (int64_t c0 = 0; c0 < p.ncols; c0 += QUANT_CHUNK) {
            int64_t n = p.ncols - c0 < QUANT_CHUNK ? p.ncols - c0 : QUANT_CHUNK;
            const float *x = quant_load_row(&quant_kernels_generic, t, &p, row, c0, n, xs);
            quant_dequantize_span(&quant_kernels_generic, &p, q, scale, zp, row, c0, n, codes, ds);
            quant_generic_errstats(x, ds, n, partial + row / per * 3);
        }
    quant_errstats_sum(partial, items, out);
    free(partial);
}

/* Whole calls: int8 / uint8 / int16 / int4 (packed) / uint4 / fp8 / nf4 / mxfp4, symmetric and
 * asymmetric, per channel and tiles of 16, 32, 128 (and 8, which AVX-512 declines), rows
 * longer than a chunk and not a multiple of 16, float32 and bf16 (read in place), the fp8 / nf4 /
 * e2m1 codes AVX2 declines: the sums of
 * quant_quantize_measured and quant_measure_error on every ISA and 1-3 threads equal the three
 * steps' bit for bit. */
START_TEST(quantize_measured_equals_three_steps)
{
    static const ecase cases[] = {
        {QUANT_QTYPE_INT8, "absmax", 37, 9001, 0, QUANT_DTYPE_BF16},
        {QUANT_QTYPE_INT8, "absmax", 64, 4096, 0, QUANT_DTYPE_F32},
        {QUANT_QTYPE_INT8, "minmax", 21, 1000, 0, QUANT_DTYPE_BF16},
        {QUANT_QTYPE_UINT8, "minmax", 19, 784, 16, QUANT_DTYPE_F32},
        {QUANT_QTYPE_INT16, "absmax", 9, 8320, 128, QUANT_DTYPE_BF16},
        {QUANT_QTYPE_INT4, "absmax", 40, 4096, 128, QUANT_DTYPE_BF16},
        {QUANT_QTYPE_INT4, "absmax", 33, 1056, 32, QUANT_DTYPE_F32},
        {QUANT_QTYPE_INT4, "absmax", 17, 200, 8, QUANT_DTYPE_BF16},
        {QUANT_QTYPE_UINT4, "minmax", 23, 512, 16, QUANT_DTYPE_BF16},
        {QUANT_QTYPE_INT8, "absmax", 5, 33, 1, QUANT_DTYPE_F32},
        {QUANT_QTYPE_FP8_E4M3FN, "absmax", 13, 3000, 0, QUANT_DTYPE_BF16},
        {QUANT_QTYPE_NF4, "absmax", 11, 640, 64, QUANT_DTYPE_F32},
        {QUANT_QTYPE_MXFP4, "absmax", 12, 4128, 32, QUANT_DTYPE_BF16},
    };
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {2026};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const ecase *c = &cases[ci];
        quant_how how;
        quant_how_init(&how, c->qtype);
        how.calibration = c->method;
        if (c->tile) {
            how.n_tiles = 1;
            how.tiles[0] = (quant_tile){.axis = 1, .size = c->tile};
        }
        how.channel_axes[how.n_channel_axes++] = 0;
        int64_t shape[2] = {c->rows, c->cols}, n = c->rows * c->cols, ss[2];
        quant_error err;
        ck_assert_msg(quant_scale_shape(&how, 2, shape, ss, &err) == QUANT_OK, "case %zu: %s", ci,
                      err.message);
        int64_t sn = ss[0] * ss[1], qb = quant_qvalue_bytes(&how, 2, shape);
        float *f = malloc((size_t)n * sizeof *f);
        tu_fill(&r, f, n, ci % 2 ? 1.0f : 300.0f, 1);
        for (int64_t i = 0; i < c->cols / 3; i++) f[i] = 0.0f; /* groups of zeros in row 0 */
        void *data = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) {
            if (c->dtype == QUANT_DTYPE_BF16)
                ((uint16_t *)data)[i] = quant_f32_to_bf16(f[i]);
            else
                ((float *)data)[i] = f[i];
        }
        quant_tensor t;
        quant_tensor_init(&t, c->dtype, 2, shape, data, NULL);
        uint8_t *q = calloc((size_t)qb + 1, 1);
        float *scale = calloc((size_t)sn, sizeof *scale);
        int32_t *zp = calloc((size_t)sn, sizeof *zp);
        bool asym = strcmp(c->method, "minmax") == 0;
        quant_error_stats want, got, sep;
        for (int k = 0; k < nisa; k++)
            for (int threads = 1; threads <= 3; threads++) {
                quant_ctx *ctx = tu_ctx(isas[k], threads);
                ck_assert_int_eq(quant_quantize_measured(ctx, &how, &t, q, scale, zp, &got, &err),
                                 QUANT_OK);
                if (k == 0 && threads == 1)
                    reference_sums(c, &how, &t, q, scale, asym ? zp : NULL, &want);
                ck_assert_int_eq(
                    quant_measure_error(ctx, &how, &t, q, scale, asym ? zp : NULL, &sep, &err),
                    QUANT_OK);
                ck_assert_msg(memcmp(&got, &want, sizeof got) == 0 &&
                                  memcmp(&sep, &want, sizeof sep) == 0,
                              "case %zu on %s/%d: fused %a %a %a, measured %a %a %a, three steps "
                              "%a %a %a",
                              ci, quant_isa_name(isas[k]), threads, got.sum_sq_x, got.sum_sq_err,
                              got.max_abs_err, sep.sum_sq_x, sep.sum_sq_err, sep.max_abs_err,
                              want.sum_sq_x, want.sum_sq_err, want.max_abs_err);
                ck_assert(want.sum_sq_err > 0.0 && want.max_abs_err > 0.0);
                quant_ctx_free(ctx);
            }
        free(q);
        free(scale);
        free(zp);
        free(data);
        free(f);
    }
}
END_TEST

Suite *suite_errq(void)
{
    Suite *s = suite_create("errq");
    TCase *tc = tcase_create("errstats_codes");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, kernels_errstats_codes_equal_three_steps);
    tcase_add_test(tc, errstats_codes_every_shape_and_nan);
    tcase_add_test(tc, quantize_measured_equals_three_steps);
    suite_add_tcase(s, tc);
    return s;
}
