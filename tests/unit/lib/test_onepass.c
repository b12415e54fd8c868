/* test_onepass.c -- the generalised one-pass kernel (quantize_onepass: MX and nvfp4 scales
 * derived in registers, minmax scales and zero points, bf16 rows read in place) against the
 * three generic passes, bit for bit,
 * at the kernel and at the driver level (every ISA and thread count equal to the scalar run);
 * and the identity the MX path rests on: x * (1/s) == x / s for every power of two s.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../testutil.h"
#include "internal.h"

/* For every normal power of two s = 2^e (e in [-126, 127]; 1/2^127 is the subnormal 2^-127),
 * and float32 values x of every binade (subnormals, zeros of both signs, values near FLT_MAX),
 * the product by the reciprocal equals the quotient bit for bit. */
/* f[0..shape[0] * shape[1]) as a rows x cols tensor of dtype dt (float32, or bf16 rounded to
 * nearest even) in a buffer of its own (the caller frees it), viewed by *t. */
static void *input_as(quant_dtype dt, const float *f, const int64_t shape[2], quant_tensor *t)
{
    int64_t n = shape[0] * shape[1];
    void *data = malloc((size_t)n * 4);
    ck_assert_ptr_nonnull(data);
    for (int64_t i = 0; i < n; i++) {
        if (dt == QUANT_DTYPE_F32)
            ((float *)data)[i] = f[i];
        else
            ((uint16_t *)data)[i] = quant_f32_to_bf16(f[i]);
    }
    ck_assert_int_eq(quant_tensor_init(t, dt, 2, shape, data, NULL), QUANT_OK);
    return data;
}

START_TEST(mx_reciprocal_equals_division)
{
    tu_rng r = {99};
    enum { PER_EXP = 3000 };
    for (int e = -126; e <= 127; e++) {
        volatile float s = ldexpf(1.0f, e);
        volatile float rc = 1.0f / s;
        ck_assert_msg(rc * s == 1.0f, "1/2^%d not exact", e);
        for (int i = 0; i < PER_EXP; i++) {
            uint32_t bits = (uint32_t)tu_next(&r);
            if (i < 8) { /* the edges: zeros, smallest subnormal, FLT_MAX, values at 1 */
                static const uint32_t edge[8] = {0x00000000u, 0x80000000u, 0x00000001u,
                                                 0x807fffffu, 0x7f7fffffu, 0xff7fffffu,
                                                 0x3f800000u, 0x00800000u};
                bits = edge[i];
            }
            if ((bits & 0x7f800000u) == 0x7f800000u) bits &= 0xbfffffffu; /* keep it finite */
            volatile float x = qn_float(bits);
            volatile float a = x * rc, b = x / s;
            ck_assert_msg(qn_bits(a) == qn_bits(b), "x %a s 2^%d: %a vs %a", (double)x, e,
                          (double)a, (double)b);
        }
    }
}
END_TEST

typedef struct rule {
    quant_kcode kc;
    quant_scale_kind kind;
    float bound, c, qmin, qmax;
} rule;

/* mxfp8, mxfp4, nvfp4 and the integer kinds, each from float32 or bf16 read in place */
static const rule rules[] = {
    {QK_E4M3, QUANT_SCALE_MX, 448.0f, 60.0f / 31.0f, 0.0f, 0.0f},
    {QK_E2M1, QUANT_SCALE_MX, 6.0f, 12.0f / 7.0f, 0.0f, 0.0f},
    {QK_E2M1, QUANT_SCALE_NVFP4, 6.0f, 0.0f, 0.0f, 0.0f},
    {QK_I8, QUANT_SCALE_LINEAR, 127.5f, 0.0f, -128.0f, 127.0f},
    {QK_I8, QUANT_SCALE_LINEAR, 7.5f, 0.0f, -8.0f, 7.0f},
    {QK_U8, QUANT_SCALE_LINEAR, 255.5f, 0.0f, 0.0f, 255.0f},
    {QK_I16, QUANT_SCALE_LINEAR, 32767.5f, 0.0f, -32768.0f, 32767.0f},
};
#define NRULES ((int)(sizeof rules / sizeof rules[0]))

/* One group of awkward values: normal, zeros, subnormals only (the tiny rule), values near
 * FLT_MAX with small ones beside them (MX scale 2^126: quotients that underflow), a max |x|
 * just above B * 2^-63 (the smallest MX scale, 2^-63), the e2m1 midpoints times a power of two
 * (ties), or all equal to -v. */
static void awkward_group(tu_rng *r, float *f, int64_t tile, float bound)
{
    static const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
    float v = 0.25f + (float)tu_below(r, 1000) / 64.0f;
    int64_t at = tu_below(r, tile);
    switch (tu_below(r, 8)) {
    case 0:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_below(r, 2) ? 0.0f : -0.0f;
        break;
    case 1:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_normal(r, 1e-39f);
        break;
    case 2:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_normal(r, 1e-30f);
        f[at] = tu_below(r, 2) ? 3.3e38f : -3.38e38f; /* finite in bf16 too */
        break;
    case 3:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_normal(r, 1e-20f) * 0x1p-63f;
        f[at] = bound * 0x1p-63f * (1.0f + (float)tu_below(r, 64) / 64.0f);
        break;
    case 4: {
        float s = ldexpf(1.0f, (int)tu_below(r, 40) - 20);
        for (int64_t j = 0; j < tile; j++)
            f[j] = mids[tu_below(r, 8)] * s * (tu_below(r, 2) ? 1.0f : -1.0f);
        break;
    }
    case 5:
        for (int64_t j = 0; j < tile; j++) f[j] = -v;
        break;
    default:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_normal(r, v);
        break;
    }
}

/* The three generic passes of one rule: absmax, the rule's scales, quantize. Returns nonzero
 * when a value or a scale is not finite (the one-pass kernel must then decline). */
static int three_pass(const rule *ru, float g, const float *x, int64_t n, int64_t c0, int64_t tile,
                      float *acc, float *scale, uint8_t *q)
{
    int64_t g0 = c0 / tile, groups = n / tile;
    memset(acc, 0, (size_t)(g0 + groups) * sizeof *acc);
    if (quant_generic_absmax(x, n, c0, tile, acc)) return 1;
    if (ru->kind == QUANT_SCALE_LINEAR) {
        if (quant_generic_lin_scales(acc + g0, groups, ru->bound, scale + g0)) return 1;
    } else if (ru->kind == QUANT_SCALE_MX) {
        quant_generic_mx_scales(acc + g0, groups, ru->bound, ru->c, scale + g0);
    } else {
        quant_generic_nvfp4_scales(acc + g0, groups, g, scale + g0);
    }
    for (int64_t i = g0; i < g0 + groups; i++)
        if (qn_nonfinite(scale[i])) return 1;
    quant_krow kr = {ru->kc, tile, scale, NULL, ru->qmin, ru->qmax, NULL, 0, false};
    quant_generic_quantize(&kr, x, n, c0, q);
    return 0;
}

/* The kernel alone: tiles 16/32 (and 64 for integers), group-aligned offsets, f32 and bf16
 * sources, e2m1 codes packed or not, 1..48 groups (the 16-group batches and the tail), nvfp4 global
 * scales from 2^-100 to 2^100, NaN and +-Inf; plus the declines outside the contract. */
START_TEST(kernels_onepass_match_three_pass)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {5150};
    enum { MAXG = 48, MAXT = 64, MAXN = MAXG * MAXT, OFFG = 5 };
    static const float gs[] = {1.0f, 2688.0f / 3.0f, 0x1p-100f, 0x1p100f, 1e-3f, 7.25f};
    static float x[MAXN], acc[MAXG + OFFG], s1[MAXG + OFFG], s2[MAXG + OFFG];
    static uint16_t h[MAXN];
    static uint8_t q1[2 * MAXN + 1], q2[2 * MAXN + 1];
    int served = 0;
    for (int it = 0; it < tu_iters(2000); it++) {
        const rule *ru = &rules[tu_below(&r, NRULES)];
        bool lin = ru->kind == QUANT_SCALE_LINEAR, bf16 = tu_below(&r, 2);
        int64_t tile = (int64_t)16 << tu_below(&r, lin ? 3 : 2);
        int64_t groups = 1 + tu_below(&r, MAXN / tile < MAXG ? MAXN / tile : MAXG);
        int64_t n = groups * tile, c0 = tile * tu_below(&r, OFFG);
        float g = gs[tu_below(&r, 6)];
        for (int64_t k = 0; k < groups; k++) awkward_group(&r, x + k * tile, tile, ru->bound);
        if (tu_below(&r, 10) == 0) {
            static const float odd[] = {NAN, INFINITY, -INFINITY};
            x[tu_below(&r, n)] = odd[tu_below(&r, 3)];
        }
        if (bf16) { /* the bf16 source and the exact float32 values it stands for */
            for (int64_t j = 0; j < n; j++) {
                h[j] = quant_f32_to_bf16(x[j]);
                x[j] = quant_bf16_to_f32(h[j]);
            }
        }
        int bad = three_pass(ru, g, x, n, c0, tile, acc, s1, q1);
        bool packed = ru->kc == QK_E2M1 && tu_below(&r, 2);
        quant_onepass op = {bf16, ru->kind, ru->bound, ru->c, g, packed, false, 1.0f, NULL};
        quant_krow kr = {ru->kc, tile, NULL, NULL, ru->qmin, ru->qmax, NULL, 0, false};
        size_t bytes = (size_t)n * (ru->kc == QK_I16 ? 2 : 1);
        if (packed && !bad) { /* the expected codes, two per byte */
            static uint8_t qp[MAXN / 2];
            quant_kernels_generic.pack(q1, n, qp);
            bytes = (size_t)n / 2;
            memcpy(q1, qp, bytes);
        }
        for (int k = 0; k < nisa; k++) {
            const quant_kernels *kk = quant_kernels_for(isas[k]);
            if (!kk->quantize_onepass) continue;
            served++;
            memset(q2, 0xaa, sizeof q2);
            memset(s2, 0xaa, sizeof s2);
            const void *src = bf16 ? (const void *)h : (const void *)x;
            int got = kk->quantize_onepass(&kr, src, n, c0, &op, s2, q2);
            ck_assert_msg(!got == !bad, "%s: kc %d rule %d tile %lld bf16 %d: returned %d, %d",
                          quant_isa_name(isas[k]), ru->kc, ru->kind, (long long)tile, bf16, got,
                          bad);
            if (bad) continue;
            ck_assert_msg(memcmp(s1 + c0 / tile, s2 + c0 / tile, (size_t)groups * 4) == 0,
                          "%s: kc %d rule %d tile %lld: scales differ", quant_isa_name(isas[k]),
                          ru->kc, ru->kind, (long long)tile);
            size_t at = 0;
            while (at < bytes && q1[at] == q2[at]) at++;
            ck_assert_msg(at == bytes, "%s: kc %d rule %d tile %lld g %a: code %zu is %#x, %#x",
                          quant_isa_name(isas[k]), ru->kc, ru->kind, (long long)tile, (double)g, at,
                          at < bytes ? q2[at] : 0, at < bytes ? q1[at] : 0);
            ck_assert_msg(q2[bytes] == 0xaa, "%s wrote past the codes", quant_isa_name(isas[k]));
            /* outside the contract: declined */
            kr.tile = 48;
            ck_assert_int_ne(kk->quantize_onepass(&kr, src, 48, 0, &op, s2, q2), 0);
            kr.tile = tile;
            ck_assert_int_ne(kk->quantize_onepass(&kr, src, n, c0 + 1, &op, s2, q2), 0);
            kr.kcode = lin ? QK_E4M3 : QK_I8;
            ck_assert_int_ne(kk->quantize_onepass(&kr, src, n, c0, &op, s2, q2), 0);
            kr.kcode = ru->kc;
            if (ru->kc != QK_E2M1) { /* only e2m1 codes are packed */
                quant_onepass pk = op;
                pk.packed = true;
                ck_assert_int_ne(kk->quantize_onepass(&kr, src, n, c0, &pk, s2, q2), 0);
            }
            if (ru->kind == QUANT_SCALE_NVFP4) {
                quant_onepass no_g = op;
                no_g.g = 0.0f;
                ck_assert_int_ne(kk->quantize_onepass(&kr, src, n, c0, &no_g, s2, q2), 0);
            }
        }
    }
    for (int k = 0; k < nisa; k++) /* the AVX-512 set has it (tu_isas lists it when it runs) */
        if (isas[k] == QUANT_ISA_AVX512) ck_assert_int_gt(served, 0);
}
END_TEST

/* Through quant_quantize on every ISA and 1..3 threads against the scalar run: mxfp8, mxfp8_16,
 * mxfp4 and nvfp4 (global scale derived, or given at extremes) and int8/int4 tiles 16/32 from
 * bf16; f32 and bf16 rows of 1..700 groups (rows longer than the driver's chunk of 8192 values,
 * whose chunks end in a partial batch of 16 groups), packed and unpacked, awkward groups, and a
 * NaN or Inf refused at its index. */
START_TEST(onepass_paths_equal_scalar)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {6006};
    static const quant_qtype qts[] = {QUANT_QTYPE_MXFP8, QUANT_QTYPE_MXFP8_16, QUANT_QTYPE_MXFP4,
                                      QUANT_QTYPE_NVFP4, QUANT_QTYPE_INT8,     QUANT_QTYPE_INT4};
    static const float gs[] = {0.0f, 0.0f, 0x1p-90f, 0x1p90f, 448.0f};
    for (int it = 0; it < tu_iters(60); it++) {
        quant_qtype qt = qts[tu_below(&r, 6)];
        const quant_qtype_traits *tr = quant_qtype_traits_get(qt);
        int64_t tile = tr->fixed_tile ? tr->fixed_tile : (tu_below(&r, 2) ? 16 : 32);
        quant_how how;
        quant_how_init(&how, qt);
        how.calibration = "absmax";
        how.n_channel_axes = 1;
        how.channel_axes[0] = 0;
        how.n_tiles = 1;
        how.tiles[0] = (quant_tile){.axis = 1, .size = tile};
        how.pack = tu_below(&r, 3) != 0;
        if (tr->scale_kind == QUANT_SCALE_NVFP4) how.global_scale = gs[tu_below(&r, 5)];
        quant_dtype dt = tr->fixed_tile && tu_below(&r, 2) ? QUANT_DTYPE_F32 : QUANT_DTYPE_BF16;
        int64_t shape[2] = {1 + tu_below(&r, 3), tile * (1 + tu_below(&r, 700))};
        int64_t n = shape[0] * shape[1];
        float *f = malloc((size_t)n * sizeof *f);
        for (int64_t k = 0; k < n / tile; k++)
            awkward_group(&r, f + k * tile, tile, tr->symmetric_bound);
        int64_t nan_at = tu_below(&r, 6) == 0 ? tu_below(&r, n) : -1;
        if (nan_at >= 0) f[nan_at] = tu_below(&r, 2) ? NAN : INFINITY;
        quant_tensor t;
        void *data = input_as(dt, f, shape, &t);
        int64_t ss[2];
        ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, NULL), QUANT_OK);
        int64_t sn = ss[0] * ss[1], qb = quant_qvalue_bytes(&how, 2, shape);
        uint8_t *q0 = calloc((size_t)qb, 1), *q1 = calloc((size_t)qb, 1);
        float *s0 = calloc((size_t)sn, 4), *s1 = calloc((size_t)sn, 4);
        quant_error e0, e1;
        quant_ctx *ctx = tu_ctx(QUANT_ISA_SCALAR, 1);
        quant_status st0 = quant_quantize(ctx, &how, &t, q0, s0, NULL, &e0);
        quant_ctx_free(ctx);
        ck_assert_msg(st0 == (nan_at >= 0 ? QUANT_ERR_NONFINITE : QUANT_OK), "%s: status %d: %s",
                      tr->name, st0, e0.message);
        if (nan_at >= 0) ck_assert_int_eq(e0.index, nan_at);
        for (int k = 0; k < nisa; k++) {
            for (int threads = 1; threads <= 3; threads++) {
                ctx = tu_ctx(isas[k], threads);
                memset(q1, 0x5a, (size_t)qb);
                quant_status st1 = quant_quantize(ctx, &how, &t, q1, s1, NULL, &e1);
                quant_ctx_free(ctx);
                ck_assert_msg(st1 == st0, "%s %s/%d: status %d vs %d", tr->name,
                              quant_isa_name(isas[k]), threads, st1, st0);
                if (st0 != QUANT_OK) {
                    ck_assert_int_eq(e1.index, e0.index);
                    continue;
                }
                ck_assert_msg(memcmp(s0, s1, (size_t)sn * 4) == 0, "%s %s/%d in %s: scales differ",
                              tr->name, quant_isa_name(isas[k]), threads, quant_dtype_name(dt));
                int64_t at = 0;
                while (at < qb && q0[at] == q1[at]) at++;
                ck_assert_msg(at == qb, "%s %s/%d in %s [%lld x %lld]: byte %lld is %#x, %#x",
                              tr->name, quant_isa_name(isas[k]), threads, quant_dtype_name(dt),
                              (long long)shape[0], (long long)shape[1], (long long)at,
                              at < qb ? q1[at] : 0, at < qb ? q0[at] : 0);
            }
        }
        free(q0);
        free(q1);
        free(s0);
        free(s1);
        free(data);
        free(f);
    }
}
END_TEST

/* A row the one-pass kernel declines after measuring its first chunk: nvfp4 under the smallest
 * global scale the plan takes (2^-119, so every block scale is finite), a NaN in row 0's second
 * chunk. The three-pass redo refuses the tensor with the same status and message (naming the
 * element) on every ISA and thread count as the scalar run. (A decline the redo then completes
 * came from a subnormal global scale, which the plan refuses since the finite-scale rule.) */
START_TEST(onepass_decline_refuses_like_scalar)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    quant_how how;
    quant_how_init(&how, QUANT_QTYPE_NVFP4);
    how.calibration = "absmax";
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    how.n_tiles = 1;
    how.tiles[0] = (quant_tile){.axis = 1, .size = 16};
    how.pack = false;
    how.global_scale = 0x1p-119f;
    int64_t shape[2] = {2, 3 * 8192};
    int64_t n = shape[0] * shape[1];
    float *f = malloc((size_t)n * sizeof *f);
    ck_assert_ptr_nonnull(f);
    for (int64_t i = 0; i < n; i++) f[i] = (i % 3 == 0 ? -1e37f : 3e36f) * (float)(1 + i % 5);
    f[8192 + 40] = NAN; /* row 0, second chunk */
    quant_tensor t;
    ck_assert_int_eq(quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, f, NULL), QUANT_OK);
    int64_t ss[2];
    ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, NULL), QUANT_OK);
    int64_t sn = ss[0] * ss[1], qb = quant_qvalue_bytes(&how, 2, shape);
    uint8_t *q = malloc((size_t)qb);
    float *s = malloc((size_t)sn * 4);
    quant_error e0, e;
    quant_error_stats st;
    quant_ctx *ctx = tu_ctx(QUANT_ISA_SCALAR, 1);
    quant_status st0 = quant_quantize_measured(ctx, &how, &t, q, s, NULL, &st, &e0);
    quant_ctx_free(ctx);
    ck_assert_msg(st0 != QUANT_OK && strstr(e0.message, "8232"), "scalar: %d %s", st0, e0.message);
    for (int k = 0; k < nisa; k++)
        for (int threads = 1; threads <= 2; threads++) {
            ctx = tu_ctx(isas[k], threads);
            quant_status st1 = quant_quantize_measured(ctx, &how, &t, q, s, NULL, &st, &e);
            quant_ctx_free(ctx);
            ck_assert_msg(st1 == st0 && strcmp(e.message, e0.message) == 0, "%s/%d: %d %s",
                          quant_isa_name(isas[k]), threads, st1, e.message);
        }
    free(q);
    free(s);
    free(f);
}
END_TEST

/* One group for the minmax rules (range R = qmax - qmin): zeros of both signs, all positive,
 * all negative, values at the ties of x / s + zp (lo = -L * 2^k, hi = (R - L) * 2^k, so
 * s = 2^k, and x = (m + 1/2) * 2^k), huge magnitudes (hi - lo overflows: a refused scale),
 * tiny ones (the tiny rule), or normal values around an offset. */
static void minmax_group(tu_rng *r, float *f, int64_t tile, float qmin, float qmax)
{
    float range = qmax - qmin, v = 0.25f + (float)tu_below(r, 1000) / 64.0f;
    switch (tu_below(r, 8)) {
    case 0:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_below(r, 2) ? 0.0f : -0.0f;
        break;
    case 1:
        for (int64_t j = 0; j < tile; j++) f[j] = v + fabsf(tu_normal(r, v));
        break;
    case 2:
        for (int64_t j = 0; j < tile; j++) f[j] = -v - fabsf(tu_normal(r, v));
        break;
    case 3: {
        float p2 = ldexpf(1.0f, (int)tu_below(r, 40) - 20);
        float lo = -(float)(1 + tu_below(r, (uint64_t)range - 1));
        f[0] = lo * p2;
        f[1] = (range + lo) * p2;
        for (int64_t j = 2; j < tile; j++)
            f[j] = (lo + (float)tu_below(r, (uint64_t)range) + 0.5f) * p2;
        break;
    }
    case 4:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_normal(r, 1e37f);
        if (tu_below(r, 4) == 0) f[tu_below(r, tile)] = tu_below(r, 2) ? 3.3e38f : -3.3e38f;
        break;
    case 5:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_normal(r, 1e-20f) * 0x1p-63f;
        break;
    default:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_normal(r, v) + v * (float)tu_below(r, 3);
        break;
    }
}

/* One quant_quantize_measured call's outputs. */
typedef struct mm_out {
    quant_status st;
    quant_error e;
    quant_error_stats stats;
} mm_out;

static mm_out mm_run(quant_isa isa, int threads, const quant_how *how, const quant_tensor *t,
                     bool measured, void *q, float *s, int32_t *zp)
{
    mm_out o;
    quant_ctx *ctx = tu_ctx(isa, threads);
    o.st = quant_quantize_measured(ctx, how, t, q, s, zp, measured ? &o.stats : NULL, &o.e);
    quant_ctx_free(ctx);
    if (!measured) o.stats = (quant_error_stats){0};
    return o;
}

/* minmax and minmax,0.9 through quant_quantize_measured on every ISA and 1..3 threads against
 * the scalar run: int8, uint8, int4, uint4 (packed or not), tiles 16/32/64, f32 and bf16 rows of
 * 1..700 groups (rows longer than a chunk), minmax_group's groups, a NaN or Inf refused at the
 * scalar run's index; codes, scales, zero points, status, message and error sums equal. */
START_TEST(minmax_paths_equal_scalar)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {7117};
    static const quant_qtype qts[] = {QUANT_QTYPE_INT8, QUANT_QTYPE_UINT8, QUANT_QTYPE_INT4,
                                      QUANT_QTYPE_UINT4};
    for (int it = 0; it < tu_iters(80); it++) {
        quant_qtype qt = qts[tu_below(&r, 4)];
        const quant_qtype_traits *tr = quant_qtype_traits_get(qt);
        int64_t tile = (int64_t)16 << tu_below(&r, 3);
        quant_how how;
        quant_how_init(&how, qt);
        how.calibration = tu_below(&r, 2) ? "minmax" : "minmax,0.9";
        how.n_channel_axes = 1;
        how.channel_axes[0] = 0;
        how.n_tiles = 1;
        how.tiles[0] = (quant_tile){.axis = 1, .size = tile};
        how.pack = tu_below(&r, 3) != 0;
        bool measured = tu_below(&r, 2);
        quant_dtype dt = tu_below(&r, 2) ? QUANT_DTYPE_F32 : QUANT_DTYPE_BF16;
        int64_t shape[2] = {1 + tu_below(&r, 3), tile * (1 + tu_below(&r, 700))};
        int64_t n = shape[0] * shape[1];
        float *f = malloc((size_t)n * sizeof *f);
        ck_assert_ptr_nonnull(f);
        bool huge_ok = tu_below(&r, 3) == 0; /* else no group overflows hi - lo */
        for (int64_t k = 0; k < n / tile; k++) {
            do minmax_group(&r, f + k * tile, tile, (float)tr->qmin, (float)tr->qmax);
            while (!huge_ok && fabsf(f[k * tile]) > 1e30f);
        }
        int64_t nan_at = tu_below(&r, 6) == 0 ? tu_below(&r, n) : -1;
        if (nan_at >= 0) f[nan_at] = tu_below(&r, 2) ? NAN : -INFINITY;
        quant_tensor t;
        void *data = input_as(dt, f, shape, &t);
        int64_t ss[2];
        ck_assert_int_eq(quant_scale_shape(&how, 2, shape, ss, NULL), QUANT_OK);
        int64_t sn = ss[0] * ss[1], qb = quant_qvalue_bytes(&how, 2, shape);
        uint8_t *q0 = calloc((size_t)qb, 1), *q1 = calloc((size_t)qb, 1);
        float *s0 = calloc((size_t)sn, 4), *s1 = calloc((size_t)sn, 4);
        int32_t *z0 = calloc((size_t)sn, 4), *z1 = calloc((size_t)sn, 4);
        ck_assert(q0 && q1 && s0 && s1 && z0 && z1);
        mm_out o0 = mm_run(QUANT_ISA_SCALAR, 1, &how, &t, measured, q0, s0, z0);
        if (nan_at >= 0) {
            ck_assert_int_eq(o0.st, QUANT_ERR_NONFINITE);
            ck_assert_int_eq(o0.e.index, nan_at);
        } else if (!huge_ok) {
            ck_assert_msg(o0.st == QUANT_OK, "%s: %s", tr->name, o0.e.message);
        }
        for (int k = 0; k < nisa; k++) {
            for (int threads = 1; threads <= 3; threads++) {
                memset(q1, 0x5a, (size_t)qb);
                mm_out o1 = mm_run(isas[k], threads, &how, &t, measured, q1, s1, z1);
                const char *isa = quant_isa_name(isas[k]);
                ck_assert_msg(o1.st == o0.st && strcmp(o1.e.message, o0.e.message) == 0,
                              "%s %s %s/%d: status %d (%s) vs %d (%s)", tr->name, how.calibration,
                              isa, threads, o1.st, o1.e.message, o0.st, o0.e.message);
                if (o0.st != QUANT_OK) continue;
                ck_assert_msg(memcmp(s0, s1, (size_t)sn * 4) == 0, "%s %s/%d: scales differ",
                              tr->name, isa, threads);
                int64_t zat = 0;
                while (zat < sn && z0[zat] == z1[zat]) zat++;
                ck_assert_msg(zat == sn, "%s %s %s/%d tile %lld: zero point %lld is %d, %d",
                              tr->name, how.calibration, isa, threads, (long long)tile,
                              (long long)zat, zat < sn ? z1[zat] : 0, zat < sn ? z0[zat] : 0);
                int64_t at = 0;
                while (at < qb && q0[at] == q1[at]) at++;
                ck_assert_msg(at == qb, "%s %s/%d in %s tile %lld: byte %lld is %#x, %#x", tr->name,
                              isa, threads, quant_dtype_name(dt), (long long)tile, (long long)at,
                              at < qb ? q1[at] : 0, at < qb ? q0[at] : 0);
                ck_assert_msg(memcmp(&o0.stats, &o1.stats, sizeof o0.stats) == 0,
                              "%s %s/%d: error sums differ", tr->name, isa, threads);
            }
        }
        free(q0);
        free(q1);
        free(s0);
        free(s1);
        free(z0);
        free(z1);
        free(data);
        free(f);
    }
}
END_TEST

/* The kernel alone on hand-made groups (tile 16, int8, minmax): all +-0 (s 1 by the tiny rule,
 * zp = qmin, codes qmin),
 * all positive (lo +0: zp = qmin), all negative (hi +0: zp = qmax), and the ties 0.5 / 1.5 /
 * -0.5 at s = 1 (zp = -64: x / s + zp = -63.5, -62.5, -64.5, rounded half to even to -64, -62,
 * -64); a NaN and an Inf make it decline, as do a missing zp array and packed 8-bit codes. */
START_TEST(minmax_kernel_hand_values)
{
    const quant_kernels *k = quant_kernels_for(QUANT_ISA_AVX512);
    if (!k || !k->quantize_onepass) return; /* the AVX-512 set is the one that has it */
    enum { T = 16, G = 4 };
    float x[T * G];
    for (int j = 0; j < T; j++) {
        x[j] = j % 2 ? -0.0f : 0.0f;
        x[T + j] = 1.0f + (float)j;
        x[2 * T + j] = -2.0f - (float)j;
    }
    /* lo = -64, hi = 191: s = 255 / 255 = 1, zp = -128 + 64 = -64 */
    x[3 * T] = -64.0f;
    x[3 * T + 1] = 191.0f;
    x[3 * T + 2] = 0.5f;
    x[3 * T + 3] = 1.5f;
    x[3 * T + 4] = -0.5f;
    for (int j = 5; j < T; j++) x[3 * T + j] = 0.0f;
    float s[G];
    int32_t zp[G];
    int8_t q[T * G];
    quant_krow kr = {QK_I8, T, NULL, NULL, -128.0f, 127.0f, NULL, 0, false};
    quant_onepass op = {false, QUANT_SCALE_LINEAR, 127.5f, 0.0f, 0.0f, false, true, 1.0f, zp};
    ck_assert_int_eq(k->quantize_onepass(&kr, x, T * G, 0, &op, s, q), 0);
    ck_assert(s[0] == 1.0f && zp[0] == -128 && q[0] == -128 && q[1] == -128);
    ck_assert(s[1] == 16.0f / 255.0f && zp[1] == -128);
    ck_assert(s[2] == 17.0f / 255.0f && zp[2] == 127);
    ck_assert(s[3] == 1.0f && zp[3] == -64);
    ck_assert_int_eq(q[3 * T], -128);
    ck_assert_int_eq(q[3 * T + 1], 127);
    ck_assert_int_eq(q[3 * T + 2], -64);
    ck_assert_int_eq(q[3 * T + 3], -62);
    ck_assert_int_eq(q[3 * T + 4], -64);
    ck_assert_int_eq(q[3 * T + 5], -64);
    x[T + 3] = NAN;
    ck_assert_int_ne(k->quantize_onepass(&kr, x, T * G, 0, &op, s, q), 0);
    x[T + 3] = INFINITY;
    ck_assert_int_ne(k->quantize_onepass(&kr, x, T * G, 0, &op, s, q), 0);
    x[T + 3] = 4.0f;
    ck_assert_int_eq(k->quantize_onepass(&kr, x, T * G, 0, &op, s, q), 0);
    quant_onepass bad = op;
    bad.zp = NULL;
    ck_assert_int_ne(k->quantize_onepass(&kr, x, T * G, 0, &bad, s, q), 0);
    bad = op;
    bad.packed = true; /* int8 codes do not fit a nibble */
    ck_assert_int_ne(k->quantize_onepass(&kr, x, T * G, 0, &bad, s, q), 0);
}
END_TEST

Suite *suite_onepass(void)
{
    Suite *s = suite_create("onepass");
    TCase *tc = tcase_create("onepass");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, mx_reciprocal_equals_division);
    tcase_add_test(tc, kernels_onepass_match_three_pass);
    tcase_add_test(tc, onepass_paths_equal_scalar);
    tcase_add_test(tc, onepass_decline_refuses_like_scalar);
    tcase_add_test(tc, minmax_paths_equal_scalar);
    tcase_add_test(tc, minmax_kernel_hand_values);
    suite_add_tcase(s, tc);
    return s;
}
