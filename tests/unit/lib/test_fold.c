/* test_fold.c -- non-temporal code stores: the quantize_stream kernels against the
 * generic quantize on random chunks, and whole
 * per-channel / long-group quantize calls (rows across work items and threads, tails, single
 * and many rows, zero rows, non-finite values) on every ISA and thread count, with the codes
 * streamed around the cache and not, against the scalar one-thread run; and the context's
 * stream_min_bytes key.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../testutil.h"
#include "internal.h"

static const struct {
    quant_kcode kc;
    float qmin, qmax, bound;
} kinds[] = {{QK_I8, -128.0f, 127.0f, 127.5f},
             {QK_I8, -8.0f, 7.0f, 7.5f},
             {QK_U8, 0.0f, 255.0f, 255.5f},
             {QK_I16, -32768.0f, 32767.0f, 32767.5f}};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])

/* Values of f[0..n): normal-ish at a random spread, with runs of zeros, exact ties of a
 * power-of-two scale, and (rarely) one non-finite value; returns whether it placed one. */
static bool fill(tu_rng *r, float *f, int64_t n, bool special)
{
    float spread = ldexpf(1.0f, (int)tu_below(r, 20) - 10);
    for (int64_t j = 0; j < n; j++) f[j] = tu_normal(r, spread);
    if (tu_below(r, 4) == 0) { /* half-integer multiples of 2^-3: ties for scales of 2^-3 */
        for (int64_t j = 0; j < n; j += 1 + tu_below(r, 7))
            f[j] = ((float)tu_below(r, 255) - 127.0f + 0.5f) * 0.125f;
    }
    if (tu_below(r, 6) == 0) {
        int64_t a = tu_below(r, n), len = tu_below(r, n - a + 1);
        for (int64_t j = a; j < a + len; j++) f[j] = 0.0f;
    }
    if (!special || tu_below(r, 8)) return false;
    static const float odd[] = {NAN, INFINITY, -INFINITY};
    f[tu_below(r, n)] = odd[tu_below(r, 3)];
    return true;
}

/* quantize_stream of every table that has one (every x86 table's AVX-512 set) against the
 * generic quantize: random lengths (tails of 1..63 values), column offsets inside a group, tiles
 * from 64 to beyond a chunk and not multiples of 16, float32 and bf16, every integer code kind,
 * the streamed stores on aligned and unaligned destinations, non-finite x (unchecked). */
START_TEST(kernels_stream_match_generic)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {9191};
    enum { MAXN = 9000, MAXG = 512 };
    static const int64_t tiles[] = {64, 100, 128, 192, 1000, 4096, 8200};
    static float x[MAXN], xw[MAXN], scale[MAXG], acc[MAXG];
    static uint16_t xb[MAXN];
    static uint8_t q1[2 * MAXN], q2[2 * MAXN + 256];
    int tested = 0;
    for (int it = 0; it < tu_iters(800); it++) {
        int ki = (int)tu_below(&r, NKINDS);
        int64_t tile = tiles[tu_below(&r, 7)];
        int64_t n = tu_below(&r, 3) ? 1 + tu_below(&r, MAXN) : 64 * (1 + tu_below(&r, MAXN / 64));
        int64_t c0 = tu_below(&r, 2) ? 0 : tu_below(&r, 2 * tile);
        if (tu_below(&r, 3) == 0) c0 -= c0 % 64;
        int64_t g0 = c0 / tile, ng = (c0 + n - 1) / tile - g0 + 1;
        bool bf16 = tu_below(&r, 2), checked = tu_below(&r, 2), stream = tu_below(&r, 2);
        bool x_odd = fill(&r, x, n, !checked);
        if (bf16) {
            for (int64_t j = 0; j < n; j++) xb[j] = quant_f32_to_bf16(x[j]);
            quant_kernels_generic.widen_bf16(xb, xw, n);
        } else {
            memcpy(xw, x, (size_t)n * 4);
        }
        /* scales from x's groups (some clipping: a smaller scale now and then) */
        memset(acc, 0, sizeof acc);
        quant_generic_absmax(xw, n, c0, tile, acc);
        for (int64_t g = 0; g < ng; g++) {
            float a = isfinite(acc[g0 + g]) ? acc[g0 + g] : 1.0f;
            scale[g0 + g] = a / kinds[ki].bound * (tu_below(&r, 5) ? 1.0f : 0.5f);
            if (!(scale[g0 + g] >= 0x1p-63f)) scale[g0 + g] = 1.0f;
        }
        quant_krow kr = {.kcode = kinds[ki].kc,
                         .tile = tile,
                         .scale = scale,
                         .qmin = kinds[ki].qmin,
                         .qmax = kinds[ki].qmax,
                         .checked = checked};
        int ref_x = quant_generic_quantize(&kr, xw, n, c0, q1);
        ck_assert(!ref_x == !(x_odd && !checked));
        size_t bytes = (size_t)n * (kinds[ki].kc == QK_I16 ? 2 : 1);
        int64_t off = tu_below(&r, 2) ? 0 : 1 + tu_below(&r, 63);
        for (int k = 0; k < nisa; k++) {
            const quant_kernels *kk = quant_kernels_for(isas[k]);
            if (!kk->quantize_stream) continue;
            tested++;
            /* 64-byte aligned (+ off), at least one byte into q2: out[-1] is checked below */
            uint8_t *out = (uint8_t *)(((uintptr_t)q2 + 64) & ~(uintptr_t)63) + off;
            memset(q2, 0xaa, sizeof q2);
            const void *xs = bf16 ? (const void *)xb : (const void *)x;
            int got = kk->quantize_stream(&kr, xs, bf16, n, c0, stream, out);
            char desc[160];
            snprintf(desc, sizeof desc,
                     "%s: kind %d tile %lld n %lld c0 %lld %s stream %d off %lld",
                     quant_isa_name(isas[k]), ki, (long long)tile, (long long)n, (long long)c0,
                     bf16 ? "bf16" : "f32", stream, (long long)off);
            ck_assert_msg(!got == !ref_x, "%s: flag %d", desc, got);
            if (!ref_x) ck_assert_msg(memcmp(q1, out, bytes) == 0, "%s: codes differ", desc);
            ck_assert_msg(out[bytes] == 0xaa && out[-1] == 0xaa, "%s: wrote outside", desc);
        }
    }
#if defined(__x86_64__) && defined(QUANT_BUILD_AVX512)
    if (quant_isa_supported(QUANT_ISA_AVX512)) ck_assert_int_gt(tested, 0);
#endif
}
END_TEST

/* Everything one quantize call gives, on a context. */
typedef struct fold_result {
    quant_status st;
    int64_t bad;
    uint8_t *q, *q_plain, *q_given;
    float *scale;
    quant_error_stats es;
} fold_result;

static void fold_run(const quant_how *how, const quant_tensor *t, quant_isa isa, int threads,
                     int64_t stream_min, fold_result *res)
{
    quant_ctx_options o = {.threads = threads, .isa = isa, .stream_min_bytes = stream_min};
    quant_error err;
    quant_ctx *ctx = quant_ctx_new(&o, &err);
    ck_assert_msg(ctx != NULL, "%s", err.message);
    int64_t ss[QUANT_MAX_RANK];
    ck_assert_int_eq(quant_scale_shape(how, t->rank, t->shape, ss, &err), QUANT_OK);
    int64_t sn = quant_numel(t->rank, ss), qb = quant_qvalue_bytes(how, t->rank, t->shape);
    res->q = calloc((size_t)qb + 1, 1);
    res->q_plain = calloc((size_t)qb + 1, 1);
    res->q_given = calloc((size_t)qb + 1, 1);
    res->scale = calloc((size_t)sn + 1, sizeof(float));
    res->st = quant_quantize_measured(ctx, how, t, res->q, res->scale, NULL, &res->es, &err);
    res->bad = err.index;
    if (res->st == QUANT_OK) { /* measured calls keep the codes in cache: the plain ones too */
        float *s2 = calloc((size_t)sn + 1, sizeof(float));
        ck_assert_int_eq(quant_quantize(ctx, how, t, res->q_plain, s2, NULL, &err), QUANT_OK);
        ck_assert(memcmp(s2, res->scale, (size_t)sn * 4) == 0);
        ck_assert_int_eq(
            quant_quantize_with_scale(ctx, how, t, res->scale, NULL, res->q_given, &err), QUANT_OK);
        free(s2);
    }
    quant_ctx_free(ctx);
}

static void fold_free(fold_result *r)
{
    free(r->q);
    free(r->q_plain);
    free(r->q_given);
    free(r->scale);
}

/* Whole calls through quantize_stream: per-channel and tiles of 64 and more, float32
 * and bf16, int2/int4 (packed or not)/int8/uint8/int16, row lengths not multiples of 16 or 64,
 * rows past a chunk (QUANT_CHUNK), one row, many rows across work items (so streams stop at
 * item ends and threads take items), zero rows, a non-finite value anywhere (the same index is
 * reported), absmax with a factor; every ISA at 1-3 threads, codes streamed (stream_min_bytes
 * 1) and not (-1), equal to the scalar one-thread run. */
START_TEST(fused_fold_equal_scalar)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {31337};
    static const int64_t cols[] = {64, 100, 1000, 1030, 4096, 8192, 9000};
    static const int64_t rows[] = {1, 2, 3, 9, 40, 70};
    static const quant_qtype qts[] = {QUANT_QTYPE_INT8, QUANT_QTYPE_INT4, QUANT_QTYPE_INT2,
                                      QUANT_QTYPE_UINT8, QUANT_QTYPE_INT16};
    static const int64_t tiles[] = {0, 0, 64, 128, 200, 1000};
    for (int it = 0; it < tu_iters(60); it++) {
        int64_t shape[2] = {rows[tu_below(&r, 6)], cols[tu_below(&r, 7)]};
        while (shape[0] * shape[1] > 200000) shape[0] /= 2;
        int64_t tile = tiles[tu_below(&r, 6)];
        if (tile && shape[1] % tile) tile = 0;
        quant_how how;
        quant_how_init(&how, qts[tu_below(&r, 5)]);
        how.calibration = tu_below(&r, 4) ? "absmax" : "absmax,0.9";
        how.pack = tu_below(&r, 2);
        how.n_channel_axes = 1;
        how.channel_axes[0] = 0;
        if (tile) {
            how.n_tiles = 1;
            how.tiles[0] = (quant_tile){.axis = 1, .size = tile};
        }
        int64_t n = shape[0] * shape[1];
        float *f = malloc((size_t)n * 4);
        for (int64_t row = 0; row < shape[0]; row++) fill(&r, f + row * shape[1], shape[1], false);
        if (tu_below(&r, 5) == 0) /* a zero row */
            memset(f + tu_below(&r, shape[0]) * shape[1], 0, (size_t)shape[1] * 4);
        int64_t nan_at = tu_below(&r, 6) == 0 ? tu_below(&r, n) : -1;
        if (nan_at >= 0) f[nan_at] = tu_below(&r, 2) ? NAN : -INFINITY;
        quant_dtype dt = tu_below(&r, 2) ? QUANT_DTYPE_BF16 : QUANT_DTYPE_F32;
        uint16_t *h = NULL;
        if (dt == QUANT_DTYPE_BF16) {
            h = malloc((size_t)n * 2);
            for (int64_t i = 0; i < n; i++) h[i] = quant_f32_to_bf16(f[i]);
        }
        quant_tensor t;
        ck_assert_int_eq(quant_tensor_init(&t, dt, 2, shape, h ? (void *)h : (void *)f, NULL),
                         QUANT_OK);
        int64_t qb = quant_qvalue_bytes(&how, 2, shape), ss[2];
        quant_scale_shape(&how, 2, shape, ss, NULL);
        fold_result ref;
        fold_run(&how, &t, QUANT_ISA_SCALAR, 1, -1, &ref);
        ck_assert_int_eq(ref.st, nan_at >= 0 ? QUANT_ERR_NONFINITE : QUANT_OK);
        for (int k = 0; k < nisa; k++)
            for (int threads = 1; threads <= 3; threads++)
                for (int sm = 0; sm < 2; sm++) {
                    fold_result got;
                    fold_run(&how, &t, isas[k], threads, sm ? 1 : -1, &got);
                    char desc[200];
                    snprintf(desc, sizeof desc, "%s [%lld %lld] tile %lld %s %s pack %d on %s/%d%s",
                             quant_qtype_traits_get(how.qtype)->name, (long long)shape[0],
                             (long long)shape[1], (long long)tile, how.calibration,
                             quant_dtype_name(dt), how.pack, quant_isa_name(isas[k]), threads,
                             sm ? " streamed" : "");
                    ck_assert_msg(got.st == ref.st && got.bad == ref.bad, "%s: status %d at %lld",
                                  desc, got.st, (long long)got.bad);
                    if (ref.st == QUANT_OK) {
                        ck_assert_msg(
                            memcmp(got.scale, ref.scale, (size_t)quant_numel(2, ss) * 4) == 0,
                            "%s: scales differ", desc);
                        ck_assert_msg(memcmp(got.q, ref.q, (size_t)qb) == 0 &&
                                          memcmp(got.q_plain, ref.q, (size_t)qb) == 0 &&
                                          memcmp(got.q_given, ref.q, (size_t)qb) == 0,
                                      "%s: codes differ", desc);
                        ck_assert_msg(memcmp(&got.es, &ref.es, sizeof got.es) == 0,
                                      "%s: error sums differ", desc);
                    }
                    fold_free(&got);
                }
        fold_free(&ref);
        free(h);
        free(f);
    }
}
END_TEST

/* stream_min_bytes: 0 takes the last-level cache size the C library reports (or the documented
 * fallback), other values are kept (negative: never). */
START_TEST(ctx_stream_min_bytes)
{
    quant_error err;
    quant_ctx_options o = {.threads = 1, .isa = QUANT_ISA_SCALAR};
    quant_ctx *c = quant_ctx_new(&o, &err);
    ck_assert_ptr_nonnull(c);
    long llc = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    ck_assert_int_eq(c->stream_min_bytes, llc > 0 ? (int64_t)llc : QUANT_STREAM_DEFAULT_BYTES);
    ck_assert_int_gt(c->stream_min_bytes, 0);
    quant_ctx_free(c);
    o.stream_min_bytes = -1;
    c = quant_ctx_new(&o, &err);
    ck_assert_int_eq(c->stream_min_bytes, -1);
    quant_ctx_free(c);
    o.stream_min_bytes = 12345;
    c = quant_ctx_new(&o, &err);
    ck_assert_int_eq(c->stream_min_bytes, 12345);
    quant_ctx_free(c);
}
END_TEST

Suite *suite_fold(void)
{
    Suite *s = suite_create("fold");
    TCase *tc = tcase_create("fold");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, kernels_stream_match_generic);
    tcase_add_test(tc, fused_fold_equal_scalar);
    tcase_add_test(tc, ctx_stream_min_bytes);
    suite_add_tcase(s, tc);
    return s;
}
