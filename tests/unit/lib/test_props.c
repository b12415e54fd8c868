/* test_props.c -- property tests: over random shapes, axes, tiles, qtypes, methods, input dtypes
 * and strides, every available ISA and every thread count gives the scalar one-thread result
 * bit for bit (calibration, scales, zero points, codes, dequantized values, the error sums the
 * quantize pass takes, themselves equal to quant_measure_error's); plus the kernels alone on
 * random chunk offsets and tile widths.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../testutil.h"
#include "internal.h"

typedef struct pcase {
    quant_how how;
    char method[32];
    int rank;
    int64_t shape[4];
    quant_dtype dtype;
    bool transposed; /* input is a strided view with the first two axes swapped */
} pcase;

static const int64_t dims[] = {1, 2, 3, 5, 7, 8, 9, 16, 24, 31, 32, 33, 48, 64, 96, 100, 128};

static int64_t pick_divisor(tu_rng *r, int64_t d)
{
    for (int tries = 0; tries < 20; tries++) {
        int64_t t = 1 + tu_below(r, d);
        if (d % t == 0) return t;
    }
    return d;
}

/* Microscaling qtypes (SPEC 2b) take one tile of their fixed size, symmetric absmax/rms and
 * float32 scales: re-draw those parts of a case so that most of them run; nvfp4 gets its global
 * scale given (sometimes far from the tensor's own) or derived from the tensor. */
static void make_microscaling(tu_rng *r, pcase *c, const quant_qtype_traits *t)
{
    static const char *ms[] = {"absmax", "absmax,0.8", "rms,2.5", "absmax,3"};
    static const float gs[] = {0.0f, 0.0f, 1.0f, 3.5f, 1e-3f, 1e5f};
    int a = (int)tu_below(r, c->rank);
    c->shape[a] = t->fixed_tile * (1 + tu_below(r, 3));
    for (int k = 0; k < c->rank && quant_numel(c->rank, c->shape) > 60000; k++)
        if (k != a) c->shape[k] = 3;
    c->how.n_channel_axes = 0;
    for (int k = 0; k < c->rank; k++)
        if (k != a && tu_below(r, 2)) c->how.channel_axes[c->how.n_channel_axes++] = k;
    c->how.n_tiles = 1;
    c->how.tiles[0] =
        (quant_tile){.axis = a - (int)tu_below(r, 2) * c->rank, .size = t->fixed_tile};
    strcpy(c->method, ms[tu_below(r, 4)]);
    c->how.scale_dtype = QUANT_DTYPE_F32;
    c->how.stochastic = false;
    if (t->scale_kind == QUANT_SCALE_NVFP4) c->how.global_scale = gs[tu_below(r, 6)];
}

static void make_case(tu_rng *r, pcase *c)
{
    memset(c, 0, sizeof *c);
    do {
        c->rank = 1 + (int)tu_below(r, 4);
        for (int i = 0; i < c->rank; i++)
            c->shape[i] = dims[tu_below(r, sizeof dims / sizeof dims[0])];
    } while (quant_numel(c->rank, c->shape) > 60000);
    quant_qtype q;
    do /* ggml's block types go through quant_ggml.h, not quant_quantize() */
        q = (quant_qtype)tu_below(r, QUANT_QTYPE_COUNT);
    while (quant_qtype_traits_get(q)->kind == QUANT_CODE_GGML);
    quant_how_init(&c->how, q);
    const quant_qtype_traits *t = quant_qtype_traits_get(q);
    static const char *sym[] = {"absmax", "absmax,0.8", "rms,2.5", "fixed,1.5", "fixed,-40,40"};
    static const char *asym[] = {"minmax", "minmax,0.9", "fixed,-1,3", "fixed,0,2"};
    if (t->asymmetric_allowed && tu_below(r, 3) == 0)
        strcpy(c->method, asym[tu_below(r, 4)]);
    else
        strcpy(c->method, sym[tu_below(r, 5)]);
    c->how.calibration = c->method;
    for (int a = 0; a < c->rank; a++) {
        switch (tu_below(r, 3)) {
        case 0:
            c->how.channel_axes[c->how.n_channel_axes++] = a;
            break;
        case 1:
            c->how.tiles[c->how.n_tiles++] = (quant_tile){.axis = a - (int)tu_below(r, 2) * c->rank,
                                                          .size = pick_divisor(r, c->shape[a])};
            break;
        default:
            break;
        }
    }
    static const quant_dtype sdt[] = {QUANT_DTYPE_F32, QUANT_DTYPE_F32, QUANT_DTYPE_BF16,
                                      QUANT_DTYPE_F16};
    c->how.scale_dtype = sdt[tu_below(r, 4)];
    c->how.pack = tu_below(r, 4) != 0;
    c->how.stochastic = t->kind == QUANT_CODE_INT && tu_below(r, 6) == 0;
    c->how.sr_key = tu_next(r);
    if (t->fixed_tile) make_microscaling(r, c, t);
    static const quant_dtype in[] = {QUANT_DTYPE_F32, QUANT_DTYPE_F32, QUANT_DTYPE_BF16,
                                     QUANT_DTYPE_F16, QUANT_DTYPE_F64};
    c->dtype = in[tu_below(r, 5)];
    c->transposed = c->rank >= 2 && tu_below(r, 4) == 0;
}

/* Builds the input: data in c->dtype; a transposed case stores the tensor with its first two
 * axes swapped in memory and describes it with strides. */
static void *make_input(tu_rng *r, const pcase *c, quant_tensor *t, int64_t nan_at)
{
    int64_t n = quant_numel(c->rank, c->shape);
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    tu_fill(r, f, n, tu_below(r, 2) ? 1.0f : 300.0f, 1);
    if (nan_at >= 0) f[nan_at] = tu_below(r, 2) ? NAN : -INFINITY;
    void *data = malloc((size_t)(n ? n : 1) * 8);
    quant_tensor_init(t, c->dtype, c->rank, c->shape, data, NULL);
    if (c->transposed) {
        /* memory layout [d1, d0, rest]: element (i, j, rest) lives at (j * d0 + i) * inner */
        int64_t inner = 1;
        for (int k = 2; k < c->rank; k++) inner *= c->shape[k];
        t->strides[0] = inner;
        t->strides[1] = c->shape[0] * inner;
    }
    /* scatter f (logical row-major order) into memory through the strides */
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, off = 0;
        for (int k = c->rank - 1; k >= 0; k--) {
            off += (rem % c->shape[k]) * t->strides[k];
            rem /= c->shape[k];
        }
        switch (c->dtype) {
        case QUANT_DTYPE_BF16:
            ((uint16_t *)data)[off] = quant_f32_to_bf16(f[i]);
            break;
        case QUANT_DTYPE_F16:
            ((uint16_t *)data)[off] = quant_f32_to_f16(f[i]);
            break;
        case QUANT_DTYPE_F64:
            ((double *)data)[off] = (double)f[i] * (1.0 + 0x1p-40);
            break;
        default:
            ((float *)data)[off] = f[i];
            break;
        }
    }
    free(f);
    return data;
}

typedef struct result {
    quant_status st;
    int64_t bad;
    uint8_t *q;
    float *scale, *deq;
    int32_t *zp;
    quant_error_stats es; /* taken by the quantize pass */
} result;

/* The error sums the quantize passes take (quant_quantize_measured, and
 * quant_quantize_with_scale_measured given the scales it wrote) are those quant_measure_error
 * computes afterwards on the codes, bit for bit, with the codes of the plain calls. */
static void check_fused_measure(quant_ctx *ctx, const pcase *c, const quant_tensor *t,
                                const result *res, bool asym)
{
    quant_error err;
    const int32_t *zp = asym ? res->zp : NULL;
    quant_error_stats sep, given;
    ck_assert_int_eq(quant_measure_error(ctx, &c->how, t, res->q, res->scale, zp, &sep, &err),
                     QUANT_OK);
    ck_assert_msg(memcmp(&sep, &res->es, sizeof sep) == 0, "fused sums %a %a %a, separate %a %a %a",
                  res->es.sum_sq_x, res->es.sum_sq_err, res->es.max_abs_err, sep.sum_sq_x,
                  sep.sum_sq_err, sep.max_abs_err);
    int64_t qb = quant_qvalue_bytes(&c->how, c->rank, c->shape);
    uint8_t *q2 = calloc((size_t)qb + 1, 1), *q3 = calloc((size_t)qb + 1, 1);
    ck_assert_int_eq(
        quant_quantize_with_scale_measured(ctx, &c->how, t, res->scale, zp, q2, &given, &err),
        QUANT_OK);
    ck_assert_msg(memcmp(&given, &sep, sizeof sep) == 0, "given-scale sums differ");
    ck_assert_int_eq(quant_quantize_with_scale(ctx, &c->how, t, res->scale, zp, q3, &err),
                     QUANT_OK);
    ck_assert(memcmp(q2, res->q, (size_t)qb) == 0 && memcmp(q3, res->q, (size_t)qb) == 0);
    free(q2);
    free(q3);
}

static void run_case(const pcase *c, const quant_tensor *t, quant_isa isa, int threads, result *res)
{
    quant_ctx *ctx = tu_ctx(isa, threads);
    quant_error err;
    int64_t ss[4];
    ck_assert_int_eq(quant_scale_shape(&c->how, c->rank, c->shape, ss, &err), QUANT_OK);
    int64_t sn = quant_numel(c->rank, ss), n = quant_numel(c->rank, c->shape);
    int64_t qb = quant_qvalue_bytes(&c->how, c->rank, c->shape);
    res->q = calloc((size_t)qb + 1, 1);
    res->scale = calloc((size_t)sn + 1, sizeof(float));
    res->zp = calloc((size_t)sn + 1, sizeof(int32_t));
    res->deq = calloc((size_t)n + 1, sizeof(float));
    res->st = quant_quantize_measured(ctx, &c->how, t, res->q, res->scale, res->zp, &res->es, &err);
    res->bad = err.index;
    if (res->st == QUANT_OK) {
        quant_tensor o;
        quant_tensor_init(&o, QUANT_DTYPE_F32, c->rank, c->shape, res->deq, NULL);
        quant_calib_method m;
        quant_calib_parse(c->how.calibration, &m, NULL);
        ck_assert_int_eq(quant_dequantize(ctx, &c->how, res->q, res->scale,
                                          m.asymmetric ? res->zp : NULL, &o, &err),
                         QUANT_OK);
        check_fused_measure(ctx, c, t, res, m.asymmetric);
        /* the plain call writes the same codes */
        uint8_t *q = calloc((size_t)qb + 1, 1);
        float *scale = calloc((size_t)sn + 1, sizeof(float));
        ck_assert_int_eq(quant_quantize(ctx, &c->how, t, q, scale, res->zp, &err), QUANT_OK);
        ck_assert(memcmp(q, res->q, (size_t)qb) == 0);
        ck_assert(memcmp(scale, res->scale, (size_t)sn * sizeof(float)) == 0);
        free(q);
        free(scale);
    }
    quant_ctx_free(ctx);
}

static void free_result(result *r)
{
    free(r->q);
    free(r->scale);
    free(r->zp);
    free(r->deq);
}

static void describe(const pcase *c, char *buf, size_t len)
{
    char axes[96] = "";
    size_t at = 0;
    for (int i = 0; i < c->how.n_channel_axes && at < sizeof axes; i++)
        at += (size_t)snprintf(axes + at, sizeof axes - at, " ch%d", c->how.channel_axes[i]);
    for (int i = 0; i < c->how.n_tiles && at < sizeof axes; i++)
        at += (size_t)snprintf(axes + at, sizeof axes - at, " tile%d:%lld", c->how.tiles[i].axis,
                               (long long)c->how.tiles[i].size);
    snprintf(buf, len, "%s %s shape [%lld %lld %lld %lld]/%d%s sd %s pack %d sr %d in %s%s",
             quant_qtype_traits_get(c->how.qtype)->name, c->method, (long long)c->shape[0],
             (long long)c->shape[1], (long long)c->shape[2], (long long)c->shape[3], c->rank, axes,
             quant_dtype_name(c->how.scale_dtype), c->how.pack, c->how.stochastic,
             quant_dtype_name(c->dtype), c->transposed ? " transposed" : "");
}

START_TEST(all_isas_and_threads_equal_scalar)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {1234};
    int ran = 0;
    for (int it = 0; it < tu_iters(400); it++) {
        pcase c;
        make_case(&r, &c);
        quant_error err;
        int64_t ss[4];
        if (quant_scale_shape(&c.how, c.rank, c.shape, ss, &err) != QUANT_OK) continue;
        int64_t n = quant_numel(c.rank, c.shape);
        int64_t nan_at = (n > 0 && tu_below(&r, 8) == 0) ? tu_below(&r, n) : -1;
        quant_tensor t;
        void *data = make_input(&r, &c, &t, nan_at);
        char desc[400];
        describe(&c, desc, sizeof desc);
        int64_t sn = quant_numel(c.rank, ss);
        int64_t qb = quant_qvalue_bytes(&c.how, c.rank, c.shape);
        result ref;
        run_case(&c, &t, QUANT_ISA_SCALAR, 1, &ref);
        if (ref.st != QUANT_OK && ref.st != QUANT_ERR_NONFINITE && ref.st != QUANT_ERR_RANGE)
            ck_abort_msg("%s: status %d", desc, ref.st);
        if (nan_at >= 0) ck_assert_msg(ref.st == QUANT_ERR_NONFINITE, "%s: NaN missed", desc);
        for (int k = 0; k < nisa; k++) {
            for (int threads = 1; threads <= 3; threads++) {
                if (isas[k] == QUANT_ISA_SCALAR && threads == 1) continue;
                result got;
                run_case(&c, &t, isas[k], threads, &got);
                ck_assert_msg(got.st == ref.st, "%s on %s/%d: status %d vs %d", desc,
                              quant_isa_name(isas[k]), threads, got.st, ref.st);
                if (ref.st == QUANT_ERR_NONFINITE)
                    ck_assert_msg(got.bad == ref.bad && ref.bad == nan_at, "%s: bad index", desc);
                if (ref.st == QUANT_OK) {
                    ck_assert_msg(memcmp(got.scale, ref.scale, (size_t)sn * 4) == 0,
                                  "%s on %s/%d: scales differ", desc, quant_isa_name(isas[k]),
                                  threads);
                    ck_assert_msg(memcmp(got.zp, ref.zp, (size_t)sn * 4) == 0,
                                  "%s: zero points differ", desc);
                    int64_t at = 0;
                    while (at < qb && got.q[at] == ref.q[at]) at++;
                    ck_assert_msg(at == qb, "%s on %s/%d: code byte %lld is %#x, scalar %#x", desc,
                                  quant_isa_name(isas[k]), threads, (long long)at,
                                  at < qb ? got.q[at] : 0, at < qb ? ref.q[at] : 0);
                    ck_assert_msg(memcmp(got.deq, ref.deq, (size_t)n * 4) == 0,
                                  "%s on %s/%d: dequantized values differ", desc,
                                  quant_isa_name(isas[k]), threads);
                    ck_assert_msg(memcmp(&got.es, &ref.es, sizeof got.es) == 0,
                                  "%s on %s/%d: error sums differ", desc, quant_isa_name(isas[k]),
                                  threads);
                }
                free_result(&got);
            }
        }
        free_result(&ref);
        free(data);
        ran++;
    }
    ck_assert_int_gt(ran, tu_iters(400) / 2);
}
END_TEST

/* e2m1 codes of every ISA against the scalar ones (scale 1, so the kernel sees the float itself):
 * every 509th float bit pattern (about 8.4 million, both signs, NaN and Inf included) and every
 * float within 8 ulps of each midpoint, 0 and 6. */
START_TEST(kernels_e2m1_sampled_floats)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    enum { N = 4096 };
    static float x[N];
    static uint8_t q0[N], q1[N];
    static const float marks[] = {0.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
    float one = 1.0f;
    quant_krow kr = {QK_E2M1, 1 << 30, &one, NULL, 0.0f, 0.0f, NULL, 0, true};
    uint64_t next = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t done = 0;;) {
            int64_t n = 0;
            if (pass == 0) {
                for (; n < N && next < (1ull << 32); n++, next += 509)
                    x[n] = qn_float((uint32_t)next);
            } else {
                for (; n < N && done < 9 * 34; n++, done++) {
                    float m = marks[done / 34];
                    uint32_t b = qn_bits(m) + (uint32_t)(done % 17) - 8u;
                    x[n] = qn_float(m == 0.0f ? (uint32_t)(done % 17) : b);
                    if (done % 34 >= 17) x[n] = -x[n];
                }
            }
            if (n == 0) break;
            quant_generic_quantize(&kr, x, n, 0, q0);
            for (int k = 0; k < nisa; k++) {
                quant_kernels_for(isas[k])->quantize(&kr, x, n, 0, q1);
                int64_t at = 0;
                while (at < n && q0[at] == q1[at]) at++;
                ck_assert_msg(at == n, "%s: e2m1 of %a (bits %#x) is %d, scalar %d",
                              quant_isa_name(isas[k]), at < n ? (double)x[at] : 0.0,
                              at < n ? qn_bits(x[at]) : 0, at < n ? q1[at] : 0,
                              at < n ? q0[at] : 0);
            }
        }
    }
}
END_TEST

/* One group of f for fused_small_tiles_equal_scalar and the one-pass kernel test: normal values,
 * zeros, all equal to -v (every lane on a tie at -B), one -v among small values (the lane the
 * kernels resolve by the group's max |x|), subnormals (the tiny-scale rule), or half-integer
 * multiples of a power-of-two scale 2^-e (max |x| = bound * 2^-e: every lane on a tie). */
static void fill_group(tu_rng *r, float *f, int64_t tile, float bound)
{
    float v = 0.25f + (float)tu_below(r, 1000) / 64.0f;
    switch (tu_below(r, 8)) {
    case 6:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_normal(r, 1e-39f);
        break;
    case 7: {
        float s = ldexpf(1.0f, -(int)tu_below(r, 8));
        int64_t b = (int64_t)bound; /* the bound is an integer plus 1/2 */
        for (int64_t j = 0; j < tile; j++) f[j] = ((float)(tu_below(r, 2 * b) - b) + 0.5f) * s;
        f[tu_below(r, tile)] = tu_below(r, 2) ? bound * s : -bound * s;
        break;
    }
    case 0:
        for (int64_t j = 0; j < tile; j++) f[j] = 0.0f;
        break;
    case 1:
        for (int64_t j = 0; j < tile; j++) f[j] = -v;
        break;
    case 2:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_normal(r, v / 8.0f);
        f[tu_below(r, tile)] = -v;
        break;
    default:
        for (int64_t j = 0; j < tile; j++) f[j] = tu_normal(r, v);
        break;
    }
}

/* The fused per-row path at small tiles (the AVX-512 kernel's per-group max |x| and its
 * extreme lanes; the vector scale kernels), rows of whole groups plus ties, zero groups and
 * non-finite values, f32, bf16 and f16 input: every ISA and thread count equals the scalar run. */
START_TEST(fused_small_tiles_equal_scalar)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {777};
    static const quant_qtype qts[] = {QUANT_QTYPE_INT8,  QUANT_QTYPE_INT4,  QUANT_QTYPE_INT2,
                                      QUANT_QTYPE_INT16, QUANT_QTYPE_MXFP8, QUANT_QTYPE_MXFP4,
                                      QUANT_QTYPE_NVFP4};
    static const int64_t tiles[] = {16, 32, 48, 64, 128};
    static const quant_dtype dts[] = {QUANT_DTYPE_F32, QUANT_DTYPE_BF16, QUANT_DTYPE_F16};
    for (int it = 0; it < tu_iters(120); it++) {
        pcase c;
        memset(&c, 0, sizeof c);
        quant_qtype qt = qts[tu_below(&r, 7)];
        const quant_qtype_traits *tr = quant_qtype_traits_get(qt);
        int64_t tile = tr->fixed_tile ? tr->fixed_tile : tiles[tu_below(&r, 5)];
        quant_how_init(&c.how, qt);
        strcpy(c.method, tu_below(&r, 3) ? "absmax" : "absmax,0.9");
        c.how.calibration = c.method;
        c.how.n_channel_axes = 1;
        c.how.channel_axes[0] = 0;
        c.how.n_tiles = 1;
        c.how.tiles[0] = (quant_tile){.axis = 1, .size = tile};
        c.rank = 2;
        c.shape[0] = 1 + tu_below(&r, 4);
        c.shape[1] = tile * (1 + tu_below(&r, 40));
        c.dtype = dts[tu_below(&r, 3)];
        int64_t n = c.shape[0] * c.shape[1];
        float *f = malloc((size_t)n * sizeof *f);
        for (int64_t g = 0; g < n / tile; g++)
            fill_group(&r, f + g * tile, tile, tr->symmetric_bound);
        int64_t nan_at = tu_below(&r, 10) == 0 ? tu_below(&r, n) : -1;
        if (nan_at >= 0) f[nan_at] = tu_below(&r, 2) ? NAN : -INFINITY;
        void *data = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) {
            if (c.dtype == QUANT_DTYPE_F32)
                ((float *)data)[i] = f[i];
            else if (c.dtype == QUANT_DTYPE_BF16)
                ((uint16_t *)data)[i] = quant_f32_to_bf16(f[i]);
            else
                ((uint16_t *)data)[i] = quant_f32_to_f16(f[i]);
        }
        quant_tensor t;
        ck_assert_int_eq(quant_tensor_init(&t, c.dtype, 2, c.shape, data, NULL), QUANT_OK);
        char desc[400];
        describe(&c, desc, sizeof desc);
        int64_t ss[4];
        ck_assert_int_eq(quant_scale_shape(&c.how, 2, c.shape, ss, NULL), QUANT_OK);
        int64_t sn = quant_numel(2, ss), qb = quant_qvalue_bytes(&c.how, 2, c.shape);
        result ref;
        run_case(&c, &t, QUANT_ISA_SCALAR, 1, &ref);
        ck_assert_msg(ref.st == (nan_at >= 0 ? QUANT_ERR_NONFINITE : QUANT_OK), "%s: status %d",
                      desc, ref.st);
        for (int k = 0; k < nisa; k++) {
            for (int threads = 1; threads <= 2; threads++) {
                result got;
                run_case(&c, &t, isas[k], threads, &got);
                ck_assert_msg(got.st == ref.st && got.bad == ref.bad, "%s on %s/%d: status %d",
                              desc, quant_isa_name(isas[k]), threads, got.st);
                if (ref.st == QUANT_OK) {
                    ck_assert_msg(memcmp(got.scale, ref.scale, (size_t)sn * 4) == 0,
                                  "%s on %s/%d: scales differ", desc, quant_isa_name(isas[k]),
                                  threads);
                    int64_t at = 0;
                    while (at < qb && got.q[at] == ref.q[at]) at++;
                    ck_assert_msg(at == qb, "%s on %s/%d: code byte %lld is %#x, scalar %#x", desc,
                                  quant_isa_name(isas[k]), threads, (long long)at,
                                  at < qb ? got.q[at] : 0, at < qb ? ref.q[at] : 0);
                    ck_assert_msg(memcmp(&got.es, &ref.es, sizeof got.es) == 0,
                                  "%s on %s/%d: error sums differ", desc, quant_isa_name(isas[k]),
                                  threads);
                }
                free_result(&got);
            }
        }
        free_result(&ref);
        free(data);
        free(f);
    }
}
END_TEST

/* The one-pass kernels (quantize_absmax, where a table has one; every x86 table does) against
 * the three generic passes (absmax, lin_scales, quantize): tiles 16/32/64 at group-aligned
 * offsets, every integer code kind with its bound, groups of zeros, ties, subnormals, values
 * near FLT_MAX, NaN and +-Inf; and a decline (nonzero) for the shapes outside the contract. */
START_TEST(kernels_quantize_absmax_match_three_pass)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {4242};
    enum { MAXG = 48, MAXT = 64, MAXN = MAXG * MAXT, OFFG = 5 };
    static const struct {
        quant_kcode kc;
        float qmin, qmax, bound;
    } kinds[] = {{QK_I8, -128.0f, 127.0f, 127.5f}, {QK_I8, -8.0f, 7.0f, 7.5f},
                 {QK_I8, -2.0f, 1.0f, 1.5f},       {QK_U8, 0.0f, 255.0f, 255.5f},
                 {QK_U8, 0.0f, 15.0f, 15.5f},      {QK_I16, -32768.0f, 32767.0f, 32767.5f}};
    static const int64_t tiles[] = {16, 32, 64};
    static float x[MAXN], acc[MAXG + OFFG], s1[MAXG + OFFG], s2[MAXG + OFFG];
    static uint8_t q1[2 * MAXN], q2[2 * MAXN];
    for (int k = 0; k < nisa; k++) {
        const quant_kernels *kk = quant_kernels_for(isas[k]);
        if (isas[k] != QUANT_ISA_SCALAR) /* every SIMD set: NEON too (lib/arch/driver_body.h) */
            ck_assert_msg(kk->quantize_absmax != NULL, "%s has no one-pass kernel",
                          quant_isa_name(isas[k]));
    }
    for (int it = 0; it < tu_iters(1500); it++) {
        int ki = (int)tu_below(&r, 6);
        int64_t tile = tiles[tu_below(&r, 3)], groups = 1 + tu_below(&r, MAXG * MAXT / tile);
        int64_t n = groups * tile, c0 = tile * tu_below(&r, OFFG), g0 = c0 / tile;
        if (groups > MAXG) groups = MAXG, n = groups * tile;
        for (int64_t g = 0; g < groups; g++) fill_group(&r, x + g * tile, tile, kinds[ki].bound);
        if (tu_below(&r, 12) == 0) x[tu_below(&r, n)] = tu_below(&r, 2) ? 3.0e38f : -2.9e38f;
        if (tu_below(&r, 10) == 0) {
            static const float odd[] = {NAN, INFINITY, -INFINITY};
            x[tu_below(&r, n)] = odd[tu_below(&r, 3)];
        }
        memset(acc, 0, sizeof acc);
        int bad = quant_generic_absmax(x, n, c0, tile, acc);
        bad = bad || quant_generic_lin_scales(acc + g0, groups, kinds[ki].bound, s1 + g0);
        quant_krow kr = {kinds[ki].kc,   tile, s1, NULL, kinds[ki].qmin,
                         kinds[ki].qmax, NULL, 0,  false};
        if (!bad) quant_generic_quantize(&kr, x, n, c0, q1);
        for (int k = 0; k < nisa; k++) {
            const quant_kernels *kk = quant_kernels_for(isas[k]);
            if (!kk->quantize_absmax) continue;
            memset(q2, 0xaa, sizeof q2);
            memset(s2, 0xaa, sizeof s2);
            kr.scale = NULL;
            int got = kk->quantize_absmax(&kr, x, n, c0, kinds[ki].bound, s2, q2);
            kr.scale = s1;
            ck_assert_msg(!got == !bad, "%s: kind %d tile %lld: returned %d, three passes %d",
                          quant_isa_name(isas[k]), ki, (long long)tile, got, bad);
            if (bad) continue;
            ck_assert_msg(memcmp(s1 + g0, s2 + g0, (size_t)groups * 4) == 0,
                          "%s: kind %d tile %lld: scales differ", quant_isa_name(isas[k]), ki,
                          (long long)tile);
            size_t bytes = (size_t)n * (kinds[ki].kc == QK_I16 ? 2 : 1);
            ck_assert_msg(memcmp(q1, q2, bytes) == 0, "%s: kind %d tile %lld: codes differ",
                          quant_isa_name(isas[k]), ki, (long long)tile);
            ck_assert_msg(q2[bytes] == 0xaa, "%s wrote past the codes", quant_isa_name(isas[k]));
            /* outside the contract: declined */
            kr.tile = 48;
            ck_assert_int_ne(kk->quantize_absmax(&kr, x, 48, 0, kinds[ki].bound, s2, q2), 0);
            kr.tile = tile;
            ck_assert_int_ne(kk->quantize_absmax(&kr, x, n, c0 + 1, kinds[ki].bound, s2, q2), 0);
            kr.kcode = QK_E4M3;
            ck_assert_int_ne(kk->quantize_absmax(&kr, x, n, c0, kinds[ki].bound, s2, q2), 0);
            kr.kcode = kinds[ki].kc;
        }
    }
}
END_TEST

/* Kernels alone: random lengths, column offsets and tile widths against the generic kernels. */
START_TEST(kernels_match_generic_on_random_chunks)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {99};
    enum { MAXN = 700 };
    static float x[MAXN], scale[MAXN], a1[MAXN], a2[MAXN], b1[MAXN], b2[MAXN], d1[MAXN], d2[MAXN];
    static int32_t zp[MAXN];
    static uint8_t q1[2 * MAXN], q2[2 * MAXN];
    static const int64_t tiles[] = {1, 2, 3, 4, 7, 8, 9, 16, 31, 32, 33, 64, 128, 700};
    for (int it = 0; it < tu_iters(3000); it++) {
        int64_t n = tu_below(&r, MAXN), tile = tiles[tu_below(&r, 14)];
        int64_t c0 = tu_below(&r, 3) == 0 ? 0 : tu_below(&r, 40);
        int64_t groups = (c0 + n) / tile + 1;
        if (groups > MAXN) continue;
        tu_fill(&r, x, n, tu_below(&r, 2) ? 3.0f : 200.0f, 1);
        if (n > 0 && tu_below(&r, 10) == 0) x[tu_below(&r, n)] = INFINITY;
        for (int64_t g = 0; g < groups; g++) {
            scale[g] = 0.01f + (float)tu_below(&r, 1000) / 97.0f;
            zp[g] = (int32_t)tu_below(&r, 100) - 50;
            a1[g] = a2[g] = (float)tu_below(&r, 3);
            b1[g] = b2[g] = -(float)tu_below(&r, 3);
        }
        for (int k = 0; k < nisa; k++) {
            const quant_kernels *kk = quant_kernels_for(isas[k]);
            memcpy(a2, a1, (size_t)groups * 4);
            float a0[MAXN];
            memcpy(a0, a1, (size_t)groups * 4);
            int bad1 = quant_generic_absmax(x, n, c0, tile, a0);
            int bad2 = kk->absmax(x, n, c0, tile, a2);
            ck_assert_int_eq(bad1, bad2);
            if (!bad1) ck_assert_int_eq(memcmp(a0, a2, (size_t)groups * 4), 0);
            float m1[MAXN], m2[MAXN], x1[MAXN], x2[MAXN];
            memcpy(m1, b1, (size_t)groups * 4);
            memcpy(m2, b1, (size_t)groups * 4);
            memcpy(x1, a1, (size_t)groups * 4);
            memcpy(x2, a1, (size_t)groups * 4);
            bad1 = quant_generic_minmax(x, n, c0, tile, m1, x1);
            bad2 = kk->minmax(x, n, c0, tile, m2, x2);
            ck_assert_int_eq(bad1, bad2);
            if (!bad1)
                for (int64_t g = 0; g < groups; g++) {
                    ck_assert_float_eq(m1[g],
                                       m2[g]); /* +-0 may differ: calibration canonicalises */
                    ck_assert_float_eq(x1[g], x2[g]);
                }
            for (int kc = 0; kc < QK_COUNT; kc++) {
                quant_krow kr = {(quant_kcode)kc, tile, scale, NULL, -128.0f,
                                 127.0f,          NULL, 0,     false};
                if (kc == QK_U8) kr.qmin = 0.0f, kr.qmax = 15.0f;
                if (kc == QK_I16) kr.qmin = -32768.0f, kr.qmax = 32767.0f;
                if (kc <= QK_I16 && tu_below(&r, 2)) kr.zp = zp;
                memset(q1, 0xaa, sizeof q1);
                memset(q2, 0xaa, sizeof q2);
                bad1 = quant_generic_quantize(&kr, x, n, c0, q1);
                bad2 = kk->quantize(&kr, x, n, c0, q2);
                ck_assert_int_eq(bad1, bad2);
                if (bad1) continue;
                ck_assert_msg(memcmp(q1, q2, sizeof q1) == 0,
                              "%s quantize kc %d n %lld c0 %lld tile %lld", quant_isa_name(isas[k]),
                              kc, (long long)n, (long long)c0, (long long)tile);
                quant_generic_dequantize(&kr, q1, n, c0, d1);
                kk->dequantize(&kr, q1, n, c0, d2);
                ck_assert_msg(memcmp(d1, d2, (size_t)n * 4) == 0, "%s dequantize kc %d",
                              quant_isa_name(isas[k]), kc);
            }
        }
        (void)b2;
    }
}
END_TEST

/* The bf16-reading kernels (absmax_bf16, quantize_bf16, where a table has them) against the
 * generic kernels on the widened values: random lengths past the kernels' blocks, column offsets,
 * tiles on both sides of the in-register path's limit, ties (integers over a scale of 2, -amax
 * over amax / 127.5), the amax hint, the prefetch pointer, and non-finite values. */
START_TEST(kernels_bf16_match_widened)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {4242};
    enum { MAXN = 9000, MAXG = MAXN + 2 };
    static uint16_t h[MAXN];
    static float x[MAXN], scale[MAXG], amax[MAXG], a0[MAXG], a1[MAXG];
    static int32_t zp[MAXG];
    static uint8_t q0[2 * MAXN], q1[2 * MAXN];
    static const int64_t tiles[] = {1, 8, 16, 32, 63, 64, 100, 128, 700, 4096, 8192};
    for (int it = 0; it < tu_iters(400); it++) {
        int64_t n = tu_below(&r, MAXN), tile = tiles[tu_below(&r, 11)];
        int64_t c0 = tu_below(&r, 3) == 0 ? 0 : tu_below(&r, 300);
        int64_t groups = (c0 + n) / tile + 1;
        int mode = (int)tu_below(&r, 3); /* 0 random, 1 integers (ties at scale 2), 2 amax scale */
        tu_fill(&r, x, n, tu_below(&r, 2) ? 3.0f : 200.0f, 1);
        for (int64_t i = 0; i < n; i++) {
            if (mode == 1) x[i] = (float)((int)tu_below(&r, 511) - 255);
            h[i] = quant_f32_to_bf16(x[i]);
        }
        bool inf = n > 0 && tu_below(&r, 10) == 0;
        if (inf) h[tu_below(&r, n)] = tu_below(&r, 2) ? 0xff80u : 0x7fc1u;
        for (int64_t i = 0; i < n; i++) x[i] = quant_bf16_to_f32(h[i]);
        for (int64_t g = 0; g < groups; g++) a0[g] = a1[g] = (float)tu_below(&r, 3);
        for (int64_t g = 0; g < groups; g++) amax[g] = 0.0f;
        quant_generic_absmax(x, n, c0, tile, amax);
        for (int64_t g = 0; g < groups; g++) {
            scale[g] = mode == 1   ? 2.0f
                       : mode == 2 ? (amax[g] > 0.0f ? amax[g] / 127.5f : 1.0f)
                                   : 0.01f + (float)tu_below(&r, 1000) / 97.0f;
            zp[g] = (int32_t)tu_below(&r, 100) - 50;
        }
        for (int k = 0; k < nisa; k++) {
            const quant_kernels *kk = quant_kernels_for(isas[k]);
            if (!kk->absmax_bf16 || !kk->quantize_bf16) continue;
            memcpy(a1, a0, (size_t)groups * 4);
            float ref[MAXG];
            memcpy(ref, a0, (size_t)groups * 4);
            int bad0 = quant_generic_absmax(x, n, c0, tile, ref);
            int bad1 = kk->absmax_bf16(h, n, c0, tile, a1);
            ck_assert_int_eq(bad0, bad1);
            if (!bad0)
                ck_assert_msg(memcmp(ref, a1, (size_t)groups * 4) == 0,
                              "%s absmax_bf16 n %lld c0 %lld tile %lld", quant_isa_name(isas[k]),
                              (long long)n, (long long)c0, (long long)tile);
            for (int kc = 0; kc < QK_COUNT; kc++) {
                quant_krow kr = {(quant_kcode)kc, tile, scale, NULL, -128.0f,
                                 127.0f,          NULL, 0,     false};
                if (kc == QK_U8) kr.qmin = 0.0f, kr.qmax = 255.0f;
                if (kc == QK_I16) kr.qmin = -32768.0f, kr.qmax = 32767.0f;
                if (kc <= QK_I16 && tu_below(&r, 4) == 0) kr.zp = zp;
                if (!inf && tu_below(&r, 2)) kr.checked = true;
                if (tu_below(&r, 2)) kr.pf = (const char *)h, kr.pf_elem = 2;
                memset(q0, 0xaa, sizeof q0);
                memset(q1, 0xaa, sizeof q1);
                bad0 = quant_generic_quantize(&kr, x, n, c0, q0);
                bad1 = kk->quantize_bf16(&kr, h, n, c0, q1);
                ck_assert_int_eq(bad0, bad1);
                if (bad0) continue;
                ck_assert_msg(memcmp(q0, q1, sizeof q0) == 0,
                              "%s quantize_bf16 kc %d n %lld c0 %lld tile %lld mode %d",
                              quant_isa_name(isas[k]), kc, (long long)n, (long long)c0,
                              (long long)tile, mode);
            }
        }
    }
}
END_TEST

/* Values at and a few ulps around (k + 0.5) * s, where a reciprocal shortcut would round the
 * other way: every ISA must still give the IEEE-division result. */
START_TEST(kernels_exact_near_ties)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {2024};
    enum { N = 4096 };
    static float x[N];
    static uint8_t q1[2 * N], q2[2 * N];
    for (int it = 0; it < tu_iters(300); it++) {
        float s = it < 3 ? (float[]){1.0f / 127.5f, 3.0f / 255.0f, 0.1f}[it]
                         : qn_float(0x3a000000u + (uint32_t)tu_below(&r, 0x06000000));
        int32_t zp = (int32_t)tu_below(&r, 64) - 32;
        quant_kcode kc = (quant_kcode)tu_below(&r, 3); /* I8, U8, I16 */
        int64_t i = 0;
        while (i < N) {
            float h = (float)(tu_below(&r, 300) - 150) + 0.5f;
            float v = (h - (float)zp) * s;
            for (int d = -3; d <= 3 && i < N; d++) {
                float w = v;
                for (int k = 0; k < (d < 0 ? -d : d); k++)
                    w = nextafterf(w, d < 0 ? -INFINITY : INFINITY);
                x[i++] = w;
            }
        }
        quant_krow kr = {kc, N, &s, NULL, -128.0f, 127.0f, NULL, 0, tu_below(&r, 2) == 0};
        if (kc == QK_U8) kr.qmin = 0.0f, kr.qmax = 255.0f;
        if (kc == QK_I16) kr.qmin = -32768.0f, kr.qmax = 32767.0f;
        if (tu_below(&r, 2)) kr.zp = &zp;
        quant_generic_quantize(&kr, x, N, 0, q1);
        for (int k = 0; k < nisa; k++) {
            quant_kernels_for(isas[k])->quantize(&kr, x, N, 0, q2);
            ck_assert_msg(memcmp(q1, q2, (size_t)N * (kc == QK_I16 ? 2 : 1)) == 0,
                          "%s kc %d scale %a zp %d", quant_isa_name(isas[k]), kc, (double)s,
                          kr.zp ? zp : 0);
        }
    }
}
END_TEST

/* fp8 and nf4 codes at their decision boundaries: every midpoint between neighbouring fp8
 * values and every NF4 threshold, a few ulps either side, through every ISA's kernel. */
START_TEST(kernels_exact_at_code_boundaries)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    enum { MAXV = 8192 };
    static float x[MAXV];
    static uint8_t q1[MAXV], q2[MAXV];
    for (int kind = 0; kind < 3; kind++) {
        int n = 0;
        if (kind == 2) {
            const float *lv = quant_nf4_levels;
            for (int i = 0; i < 15; i++) {
                float mid = (lv[i] + lv[i + 1]) / 2;
                for (int d = -40; d <= 40 && n < MAXV; d++) {
                    float v = mid;
                    for (int k = 0; k < (d < 0 ? -d : d); k++)
                        v = nextafterf(v, d < 0 ? -2.0f : 2.0f);
                    x[n++] = v;
                }
            }
            for (int c = 0; c <= 32 && n + 3 <= MAXV; c++) { /* multiples of 1/16 */
                float b = -1.0f + (float)c / 16.0f;
                x[n++] = nextafterf(b, -2.0f);
                x[n++] = b;
                x[n++] = nextafterf(b, 2.0f);
            }
            x[n++] = -7.0f;
            x[n++] = 7.0f;
        } else {
            float (*to)(uint8_t) = kind == 0 ? quant_e4m3fn_to_f32 : quant_e5m2_to_f32;
            int max_code = kind == 0 ? 0x7e : 0x7b;
            for (int sign = 0; sign < 2; sign++)
                for (int c = 0; c < max_code && n + 5 <= MAXV; c++) {
                    float a = to((uint8_t)(c | sign << 7)), b = to((uint8_t)((c + 1) | sign << 7));
                    float mid = (a + b) / 2;
                    x[n++] = mid;
                    x[n++] = nextafterf(mid, a);
                    x[n++] = nextafterf(mid, b);
                    x[n++] = a;
                    x[n++] = -a;
                }
            x[n++] = 1e30f;
            x[n++] = -1e30f;
        }
        float one = 1.0f;
        quant_kcode kc = kind == 0 ? QK_E4M3 : kind == 1 ? QK_E5M2 : QK_NF4;
        quant_krow kr = {kc, MAXV, &one, NULL, 0.0f, 0.0f, NULL, 0, false};
        quant_generic_quantize(&kr, x, n, 0, q1);
        for (int k = 0; k < nisa; k++) {
            quant_kernels_for(isas[k])->quantize(&kr, x, n, 0, q2);
            int at = 0;
            while (at < n && q1[at] == q2[at]) at++;
            ck_assert_msg(at == n, "%s kc %d: x = %a gives %#x, scalar %#x",
                          quant_isa_name(isas[k]), kc, at < n ? (double)x[at] : 0.0,
                          at < n ? q2[at] : 0, at < n ? q1[at] : 0);
        }
    }
}
END_TEST

/* Code range and symmetric bound of a kernel test row (`narrow`: int4 / uint4). */
static void kind_range(quant_kcode kc, bool narrow, float *qmin, float *qmax, float *bound)
{
    *qmin = kc == QK_I8 ? (narrow ? -8.0f : -128.0f) : kc == QK_I16 ? -32768.0f : 0.0f;
    *qmax = kc == QK_I8    ? (narrow ? 7.0f : 127.0f)
            : kc == QK_U8  ? (narrow ? 15.0f : 255.0f)
            : kc == QK_I16 ? 32767.0f
                           : 0.0f;
    *bound = kc == QK_E4M3 ? 448.0f : kc == QK_E5M2 ? 57344.0f : kc == QK_NF4 ? 1.0f : *qmax + 0.5f;
}

/* The grouped path of the shared driver (lib/arch/driver_body.h) under the heaviest redo load:
 * small tiles (every multiple of 4 below 64) from column offsets that are multiples of 4 but
 * mostly not of a block, chunks crossing its 2048-element sub-chunks, and values a few ulps from
 * a rounding tie of their own group's scale in every vector, so that the redo list fills; some
 * groups have scales outside the reciprocal's range (the division throughout), and zero points
 * per group or none. Every ISA's quantize kernel against the scalar one. */
START_TEST(kernels_grouped_near_ties)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {3141};
    enum { N = 5000, MAXG = N / 4 + 64 };
    static float x[N], sc[MAXG];
    static int32_t zp[MAXG];
    static uint8_t q1[2 * N], q2[2 * N];
    for (int it = 0; it < tu_iters(200); it++) {
        quant_kcode kc = (quant_kcode)tu_below(&r, 3); /* I8, U8, I16 */
        float qmin, qmax, bound;
        kind_range(kc, tu_below(&r, 2), &qmin, &qmax, &bound);
        int64_t tile = 4 * (1 + tu_below(&r, 15)), c0 = 4 * tu_below(&r, 64);
        int64_t n = 1 + tu_below(&r, N), g0 = c0 / tile, ng = (c0 + n - 1) / tile - g0 + 1;
        bool asym = tu_below(&r, 2);
        for (int64_t g = 0; g < ng; g++) {
            int64_t pick = tu_below(&r, 16);
            sc[g0 + g] = pick == 0   ? 0x1p-127f /* reciprocal not a normal float */
                         : pick == 1 ? 0x1p126f * 1.5f
                                     : qn_float(0x3a000000u + (uint32_t)tu_below(&r, 0x06000000));
            zp[g0 + g] = asym ? (int32_t)tu_below(&r, 16) - (kc == QK_U8 ? 0 : 8) : 0;
        }
        for (int64_t j = 0; j < n; j++) { /* h + 0.5 - zp, times the scale, then a few ulps */
            int64_t g = (c0 + j) / tile;
            float h = (float)(qmin + (float)tu_below(&r, (int64_t)(qmax - qmin) + 1)) + 0.5f;
            float v = (h - (float)zp[g]) * sc[g];
            for (int64_t k = tu_below(&r, 7) - 3; k != 0; k += k < 0 ? 1 : -1)
                v = nextafterf(v, k < 0 ? -INFINITY : INFINITY);
            x[j] = isfinite(v) ? v : h; /* (h - zp) * 1.5 * 2^126 may overflow */
        }
        quant_krow kr = {kc, tile, sc, asym ? zp : NULL, qmin, qmax, NULL, 0, it % 2 == 0};
        quant_generic_quantize(&kr, x, n, c0, q1);
        size_t bytes = (size_t)n * (kc == QK_I16 ? 2 : 1);
        for (int k = 0; k < nisa; k++) {
            memset(q2, 0xaa, sizeof q2);
            quant_kernels_for(isas[k])->quantize(&kr, x, n, c0, q2);
            ck_assert_msg(memcmp(q1, q2, bytes) == 0, "%s kc %d tile %lld c0 %lld n %lld zp %d",
                          quant_isa_name(isas[k]), kc, (long long)tile, (long long)c0, (long long)n,
                          asym);
            ck_assert_msg(q2[bytes] == 0xaa, "%s wrote past the codes", quant_isa_name(isas[k]));
        }
    }
}
END_TEST

/* Kernels alone on chunks up to QUANT_CHUNK long (past the SIMD kernels' sub-chunks and
 * 16-group batches), with each group's scale (and zero point) derived from its own values as
 * calibration does, so that a negative absmax lands on a tie; values placed a few ulps around
 * decision points; tiles at and off multiples of 16 and 64; offsets at and off 16 and 64;
 * prefetch hints of every source width. Every byte of the output buffer is compared. */
START_TEST(kernels_match_generic_on_long_chunks)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {4242};
    enum { MAXN = QUANT_CHUNK, MAXG = QUANT_CHUNK + 2 };
    static float x[MAXN], scale[MAXG], a0[MAXG], a1[MAXG], m0[MAXG], m1[MAXG], h0[MAXG], h1[MAXG];
    static float d0[MAXN], d1[MAXN];
    static int32_t zp[MAXG];
    static uint8_t q0[2 * MAXN + 64], q1[2 * MAXN + 64], pf[8 * MAXN];
    static const int64_t tiles[] = {2,  4,   8,   9,   16,   24,   32,   48,     64,
                                    96, 128, 256, 512, 1000, 2048, 4096, 1 << 20};
    for (int it = 0; it < tu_iters(400); it++) {
        int64_t n = 1 + tu_below(&r, MAXN), tile = tiles[tu_below(&r, 17)];
        int64_t c0 = (int64_t[]){0, 16 * tu_below(&r, 64), 64 * tu_below(&r, 16),
                                 tu_below(&r, 1000)}[tu_below(&r, 4)];
        quant_kcode kc = (quant_kcode)tu_below(&r, QK_COUNT);
        bool asym = kc <= QK_I16 && tu_below(&r, 2);
        float qmin, qmax, bound;
        kind_range(kc, tu_below(&r, 2), &qmin, &qmax, &bound);
        int64_t g0 = c0 / tile, ng = (c0 + n - 1) / tile - g0 + 1;
        tu_fill(&r, x, n, tu_below(&r, 2) ? 1.0f : 300.0f, 1);
        /* scales and zero points from the groups' own values (scale rows start at g0) */
        for (int64_t g = 0; g < ng; g++) {
            int64_t lo = (g0 + g) * tile - c0, hi = lo + tile;
            lo = lo < 0 ? 0 : lo;
            hi = hi > n ? n : hi;
            float amax = 0.0f, mn = 0.0f, mx = 0.0f;
            for (int64_t j = lo; j < hi; j++) {
                amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
                mn = x[j] < mn ? x[j] : mn;
                mx = x[j] > mx ? x[j] : mx;
            }
            float s = asym && qmax > qmin ? (mx - mn) / (qmax - qmin) : amax / bound;
            if (s < 0x1p-63f) s = 1.0f;
            switch (tu_below(&r, 40)) { /* now and then a scale whose reciprocal is not normal */
            case 0:
                s = 0x1p-127f;
                break;
            case 1:
                s = 0x1p127f;
                break;
            default:
                break;
            }
            scale[g0 + g] = s;
            zp[g0 + g] = qmax > qmin ? qn_convert_int(qmin - mn / s, qmin, qmax) : 0;
        }
        /* a few values right at and around decision points of their group */
        for (int k = 0; k < 64 && n > 0; k++) {
            int64_t j = tu_below(&r, n);
            float s = scale[(c0 + j) / tile], w;
            if (kc == QK_NF4)
                w = qn_nf4_thresholds[tu_below(&r, 15)] * s;
            else if (kc == QK_E4M3 || kc == QK_E5M2) {
                float (*to)(uint8_t) = kc == QK_E4M3 ? quant_e4m3fn_to_f32 : quant_e5m2_to_f32;
                uint8_t c = (uint8_t)tu_below(&r, 0x7b);
                w = (to(c) + to((uint8_t)(c + 1))) / 2 * s; /* a midpoint */
            } else
                w = ((float)(tu_below(&r, 64) - 32) + 0.5f) * s;
            for (int64_t d = tu_below(&r, 7) - 3; d != 0; d += d < 0 ? 1 : -1)
                w = nextafterf(w, d < 0 ? -INFINITY : INFINITY);
            x[j] = w;
        }
        if (tu_below(&r, 12) == 0) x[tu_below(&r, n)] = tu_below(&r, 2) ? NAN : INFINITY;
        int bad = 0; /* a placed value may overflow too */
        for (int64_t j = 0; j < n; j++) bad |= qn_nonfinite(x[j]);
        quant_krow kr = {kc,   tile, scale, asym ? zp : NULL,       qmin,
                         qmax, NULL, 0,     !bad && tu_below(&r, 2)};
        if (tu_below(&r, 2))
            kr.pf = (const char *)pf, kr.pf_elem = (int64_t[]){2, 4, 8}[tu_below(&r, 3)];
        size_t csize = kc == QK_I16 ? 2 : 1;
        for (int64_t g = 0; g < ng; g++) {
            a0[g0 + g] = (float)tu_below(&r, 3);
            m0[g0 + g] = -(float)tu_below(&r, 3);
            h0[g0 + g] = (float)tu_below(&r, 3);
        }
        memset(q0, 0xaa, sizeof q0);
        int bad0 = quant_generic_quantize(&kr, x, n, c0, q0);
        ck_assert_int_eq(bad0, bad);
        if (!bad) quant_generic_dequantize(&kr, q0, n, c0, d0);
        for (int k = 0; k < nisa; k++) {
            const quant_kernels *kk = quant_kernels_for(isas[k]);
            memcpy(a1 + g0, a0 + g0, (size_t)ng * 4);
            memcpy(m1 + g0, m0 + g0, (size_t)ng * 4);
            memcpy(h1 + g0, h0 + g0, (size_t)ng * 4);
            static float ra[MAXG], rm[MAXG], rh[MAXG];
            memcpy(ra + g0, a0 + g0, (size_t)ng * 4);
            ck_assert_int_eq(quant_generic_absmax(x, n, c0, tile, ra), bad);
            ck_assert_int_eq(kk->absmax(x, n, c0, tile, a1), bad);
            if (!bad)
                ck_assert_msg(memcmp(ra + g0, a1 + g0, (size_t)ng * 4) == 0,
                              "%s absmax n %lld c0 %lld tile %lld", quant_isa_name(isas[k]),
                              (long long)n, (long long)c0, (long long)tile);
            memcpy(rm + g0, m0 + g0, (size_t)ng * 4);
            memcpy(rh + g0, h0 + g0, (size_t)ng * 4);
            ck_assert_int_eq(quant_generic_minmax(x, n, c0, tile, rm, rh), bad);
            ck_assert_int_eq(kk->minmax(x, n, c0, tile, m1, h1), bad);
            for (int64_t g = g0; !bad && g < g0 + ng; g++) {
                ck_assert_float_eq(rm[g], m1[g]); /* +-0 may differ: calibration canonicalises */
                ck_assert_float_eq(rh[g], h1[g]);
            }
            memset(q1, 0xaa, sizeof q1);
            ck_assert_int_eq(kk->quantize(&kr, x, n, c0, q1), bad);
            if (bad) continue;
            int64_t at = 0;
            while (at < (int64_t)sizeof q0 && q0[at] == q1[at]) at++;
            ck_assert_msg(at == (int64_t)sizeof q0,
                          "%s quantize kc %d zp %d n %lld c0 %lld tile %lld: byte %lld (of %lld) "
                          "is %#x, scalar %#x",
                          quant_isa_name(isas[k]), kc, asym, (long long)n, (long long)c0,
                          (long long)tile, (long long)at, (long long)(n * (int64_t)csize), q1[at],
                          q0[at]);
            memset(d1, 0x55, (size_t)n * 4);
            kk->dequantize(&kr, q0, n, c0, d1);
            ck_assert_msg(memcmp(d0, d1, (size_t)n * 4) == 0, "%s dequantize kc %d n %lld",
                          quant_isa_name(isas[k]), kc, (long long)n);
        }
    }
}
END_TEST

/* Dequantize of every code (NaN and Inf fp8 codes included; signed nibbles; the whole int16
 * range in steps) against the scalar kernel, bit for bit, with and without zero points. */
START_TEST(kernels_dequantize_every_code)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {77};
    enum { N = 1024 };
    static uint8_t codes[2 * N];
    static float scale[N + 64], d0[N], d1[N + 1];
    static int32_t zp[N + 64];
    for (int it = 0; it < tu_iters(200); it++) {
        quant_kcode kc = (quant_kcode)(it % QK_COUNT);
        int64_t n = 1 + tu_below(&r, N), c0 = tu_below(&r, 50);
        int64_t tile = (int64_t[]){1, 3, 16, 17, 32, 64, N}[tu_below(&r, 7)];
        for (int64_t i = 0; i < n; i++) {
            if (kc == QK_I16) {
                int16_t v = (int16_t)(i * 64 - 32768 + (int64_t)tu_below(&r, 64));
                memcpy(codes + 2 * i, &v, 2);
            } else {
                codes[i] = (uint8_t)(i + it);
            }
        }
        for (int64_t g = 0; g < (c0 + n) / tile + 1; g++) {
            scale[g] = qn_float(0x30000000u + (uint32_t)tu_below(&r, 0x1e000000));
            zp[g] = (int32_t)tu_below(&r, 300) - 150;
        }
        quant_krow kr = {kc, tile, scale, tu_below(&r, 2) ? zp : NULL, 0.0f, 0.0f, NULL, 0, false};
        quant_generic_dequantize(&kr, codes, n, c0, d0);
        for (int k = 0; k < nisa; k++) {
            memset(d1, 0x55, sizeof d1);
            quant_kernels_for(isas[k])->dequantize(&kr, codes, n, c0, d1);
            int64_t at = 0;
            while (at < n && memcmp(&d0[at], &d1[at], 4) == 0) at++;
            ck_assert_msg(at == n, "%s kc %d tile %lld: element %lld is %a, scalar %a",
                          quant_isa_name(isas[k]), kc, (long long)tile, (long long)at,
                          at < n ? (double)d1[at] : 0.0, at < n ? (double)d0[at] : 0.0);
            uint32_t past;
            memcpy(&past, &d1[n], 4);
            ck_assert_uint_eq(past, 0x55555555u); /* nothing written past the end */
        }
    }
}
END_TEST

/* NF4 thresholds and fp8 midpoints times a scale other than 1, a few ulps either side, so that
 * x * (1/s) and x / s may land on different sides: every ISA must keep the division's code. */
START_TEST(kernels_exact_at_scaled_code_boundaries)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {31337};
    enum { N = 4096 };
    static float x[N];
    static uint8_t q0[N], q1[N];
    for (int it = 0; it < tu_iters(300); it++) {
        quant_kcode kc = (quant_kcode)(QK_E4M3 + it % 3);
        float s = qn_float(0x3a000000u + (uint32_t)tu_below(&r, 0x08000000));
        int64_t i = 0;
        while (i < N) {
            float b;
            if (kc == QK_NF4) {
                b = qn_nf4_thresholds[tu_below(&r, 15)];
            } else {
                float (*to)(uint8_t) = kc == QK_E4M3 ? quant_e4m3fn_to_f32 : quant_e5m2_to_f32;
                uint8_t c = (uint8_t)tu_below(&r, kc == QK_E4M3 ? 0x7e : 0x7b);
                b = (to(c) + to((uint8_t)(c + 1))) / 2 * (tu_below(&r, 2) ? 1.0f : -1.0f);
            }
            float v = b * s;
            for (int d = -4; d <= 4 && i < N; d++) {
                float w = v;
                for (int k = 0; k < (d < 0 ? -d : d); k++)
                    w = nextafterf(w, d < 0 ? -INFINITY : INFINITY);
                x[i++] = w;
            }
        }
        int64_t tile = (int64_t[]){N, 64, 48, 100}[tu_below(&r, 4)];
        float sc[N];
        for (int64_t g = 0; g < N; g++) sc[g] = s;
        quant_krow kr = {kc, tile, sc, NULL, 0.0f, 0.0f, NULL, 0, tu_below(&r, 2) == 0};
        quant_generic_quantize(&kr, x, N, 0, q0);
        for (int k = 0; k < nisa; k++) {
            quant_kernels_for(isas[k])->quantize(&kr, x, N, 0, q1);
            int64_t at = 0;
            while (at < N && q0[at] == q1[at]) at++;
            ck_assert_msg(at == N, "%s kc %d scale %a: x = %a gives %#x, scalar %#x",
                          quant_isa_name(isas[k]), kc, (double)s, at < N ? (double)x[at] : 0.0,
                          at < N ? q1[at] : 0, at < N ? q0[at] : 0);
        }
    }
}
END_TEST

/* NF4 through the reciprocal path of the shared driver (driver_body.h's QD_NF4_RECIP): values
 * whose quotient by their group's scale lies up to 64 ulps either side of a threshold, so that
 * both lanes inside the 2^-20 margin (redone by the division) and lanes just outside it (kept)
 * occur; scales across the reciprocal's range and outside it, tiles of 64 and more that divide
 * the row or not, column offsets off a group boundary, and now and then a NaN or an infinity
 * (reported unless the chunk is marked checked, when the flag is unspecified; the codes are
 * unspecified either way). Every ISA against
 * the scalar kernel. */
START_TEST(kernels_nf4_margin_edges)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {4242};
    enum { N = 3000, MAXG = 2 * N / 64 + 2 }; /* c0 < tile <= N */
    static float x[N], sc[MAXG];
    static uint8_t q0[N + 1], q1[N + 1];
    for (int it = 0; it < tu_iters(200); it++) {
        int64_t tile = (int64_t[]){64, 100, 128, 1000, N}[tu_below(&r, 5)];
        int64_t c0 = tu_below(&r, 2) ? 0 : tu_below(&r, tile), n = 1 + tu_below(&r, N);
        int64_t g0 = c0 / tile, ng = (c0 + n - 1) / tile - g0 + 1;
        for (int64_t g = 0; g < ng; g++) {
            int64_t pick = tu_below(&r, 12);
            sc[g0 + g] = pick == 0   ? 0x1p-127f /* reciprocal not a normal float */
                         : pick == 1 ? 1.0f
                                     : qn_float(0x3a000000u + (uint32_t)tu_below(&r, 0x08000000));
        }
        for (int64_t j = 0; j < n; j++) {
            float t = qn_nf4_thresholds[tu_below(&r, 15)];
            for (int64_t k = tu_below(&r, 129) - 64; k != 0; k += k < 0 ? 1 : -1)
                t = nextafterf(t, k < 0 ? -INFINITY : INFINITY);
            x[j] = t * sc[(c0 + j) / tile];
        }
        bool odd = tu_below(&r, 8) == 0; /* codes then unspecified: only the flag is compared */
        if (odd) x[tu_below(&r, n)] = tu_below(&r, 2) ? NAN : -INFINITY;
        quant_krow kr = {QK_NF4, tile, sc, NULL, 0.0f, 0.0f, NULL, 0, tu_below(&r, 2)};
        memset(q0, 0xaa, sizeof q0);
        int bad0 = quant_generic_quantize(&kr, x, n, c0, q0);
        for (int k = 0; k < nisa; k++) {
            memset(q1, 0xaa, sizeof q1);
            int bad1 = quant_kernels_for(isas[k])->quantize(&kr, x, n, c0, q1);
            ck_assert_msg(kr.checked || !bad0 == !bad1, "%s: flag %d, scalar %d",
                          quant_isa_name(isas[k]), bad1, bad0);
            if (odd) continue;
            int64_t at = 0;
            while (at <= n && q0[at] == q1[at]) at++;
            ck_assert_msg(at > n, "%s tile %lld c0 %lld: x = %a gives %#x, scalar %#x",
                          quant_isa_name(isas[k]), (long long)tile, (long long)c0,
                          at < n ? (double)x[at] : 0.0, q1[at], q0[at]);
        }
    }
}
END_TEST

/* Dequantize of all 256 byte codes (twice each; an int16 sweep for QK_I16) for every kind and
 * ISA, deterministic so that the quick (emulated) runs always reach the fp8 NaN and Inf codes:
 * per-column, small and shared scales, with and without zero points, offsets on and off a
 * vector boundary. */
START_TEST(kernels_dequantize_all_byte_codes)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    enum { N = 512 };
    static uint8_t codes[2 * N];
    static float scale[N + 8], d0[N], d1[N];
    static int32_t zp[N + 8];
    for (int64_t g = 0; g < N + 8; g++) {
        scale[g] = 0.75f + (float)g / 64.0f;
        zp[g] = (int32_t)(g % 41) - 20;
    }
    static const int64_t tiles[] = {1, 4, N + 8}, offsets[] = {0, 3};
    for (int kc = 0; kc < QK_COUNT; kc++) {
        for (int64_t i = 0; i < N; i++) {
            if (kc == QK_I16) {
                int16_t v = (int16_t)(i * 128 - 32768 + i % 7);
                memcpy(codes + 2 * i, &v, 2);
            } else {
                codes[i] = (uint8_t)i;
            }
        }
        for (int t = 0; t < 3; t++)
            for (int o = 0; o < 2; o++)
                for (int asym = 0; asym < 2; asym++) {
                    int64_t n = N - 5, c0 = offsets[o];
                    quant_krow kr = {.kcode = (quant_kcode)kc,
                                     .tile = tiles[t],
                                     .scale = scale,
                                     .zp = asym ? zp : NULL};
                    quant_generic_dequantize(&kr, codes, n, c0, d0);
                    for (int k = 0; k < nisa; k++) {
                        memset(d1, 0x55, sizeof d1);
                        quant_kernels_for(isas[k])->dequantize(&kr, codes, n, c0, d1);
                        int64_t at = 0;
                        while (at < n && memcmp(&d0[at], &d1[at], 4) == 0) at++;
                        ck_assert_msg(at == n,
                                      "%s kc %d tile %lld c0 %lld zp %d: element %lld is %#x, "
                                      "scalar %#x",
                                      quant_isa_name(isas[k]), kc, (long long)tiles[t],
                                      (long long)c0, asym, (long long)at,
                                      at < n ? qn_bits(d1[at]) : 0, at < n ? qn_bits(d0[at]) : 0);
                    }
                }
    }
}
END_TEST

/* An absmax for the scale kernels: any finite non-negative bit pattern, or one near a rounding
 * edge of the scales (powers of two times the bounds and e4m3 steps), zero, subnormal, tiny. */
static float scale_input(tu_rng *r)
{
    switch (tu_below(r, 6)) {
    case 0:
        return qn_float((uint32_t)tu_below(r, 0x7f800000));
    case 1: {
        float p = ldexpf(1.0f, (int)tu_below(r, 250) - 125) * (tu_below(r, 2) ? 6.0f : 448.0f);
        return qn_float(qn_bits(p) + (uint32_t)tu_below(r, 5) - 2u);
    }
    case 2:
        return tu_below(r, 2) ? 0.0f : qn_float((uint32_t)tu_below(r, 0x00800000));
    case 3:
        return ldexpf(1.0f + (float)tu_below(r, 16) / 8.0f, (int)tu_below(r, 40) - 70);
    case 4:
        return qn_float(0x7f7fffffu - (uint32_t)tu_below(r, 1u << 20));
    default:
        return fabsf(tu_normal(r, 3.0f));
    }
}

/* The MX, nvfp4 and linear scale kernels of every ISA against the scalar ones, bit for bit:
 * vectors, tails of every length, and a negative, NaN or infinite absmax (the MX and nvfp4
 * kernels may decline; the linear one must report the non-finite scale as the scalar one). */
START_TEST(kernels_microscaling_scales_match_generic)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {1234};
    enum { MAXN = 100 };
    static const float bounds[] = {448.0f, 6.0f, 127.5f, 7.5f, 0.25f},
                       cs[] = {1.0f, 1.5f, 1.9921875f};
    static const float gs[] = {1.0f, 1.0f / 16, 3.5f, 1e-3f, 1e5f, 2688.0f / 3.0f, 1e-30f};
    float a[MAXN], s0[MAXN], s1[MAXN];
    for (int it = 0; it < tu_iters(4000); it++) {
        int64_t n = tu_below(&r, MAXN);
        for (int64_t i = 0; i < n; i++) a[i] = scale_input(&r);
        if (n > 0 && tu_below(&r, 8) == 0) {
            static const float odd[] = {-1.0f, -0.0f, NAN, INFINITY};
            a[tu_below(&r, n)] = odd[tu_below(&r, 4)];
        }
        float bound = bounds[tu_below(&r, 5)], c = cs[tu_below(&r, 3)], g = gs[tu_below(&r, 7)];
        for (int k = 0; k < nisa; k++) {
            const quant_kernels *kk = quant_kernels_for(isas[k]);
            for (int nv = 0; nv < 3; nv++) {
                if (nv == 2) {
                    int b0 = quant_generic_lin_scales(a, n, bound, s0);
                    ck_assert_int_eq(kk->lin_scales(a, n, bound, s1), b0);
                    if (b0) continue; /* scale[] unspecified */
                } else if (nv) {
                    quant_generic_nvfp4_scales(a, n, g, s0);
                    if (kk->nvfp4_scales(a, n, g, s1)) quant_generic_nvfp4_scales(a, n, g, s1);
                } else {
                    quant_generic_mx_scales(a, n, bound, c, s0);
                    if (kk->mx_scales(a, n, bound, c, s1))
                        quant_generic_mx_scales(a, n, bound, c, s1);
                }
                int64_t at = 0;
                while (at < n && qn_bits(s0[at]) == qn_bits(s1[at])) at++;
                ck_assert_msg(at == n, "%s %s: absmax %a (g %a, B %g, C %g) gives %a, scalar %a",
                              quant_isa_name(isas[k]),
                              nv == 2 ? "linear"
                              : nv    ? "nvfp4"
                                      : "mx",
                              at < n ? (double)a[at] : 0.0, (double)g, (double)bound, (double)c,
                              at < n ? (double)s1[at] : 0.0, at < n ? (double)s0[at] : 0.0);
            }
        }
    }
}
END_TEST

Suite *suite_props(void)
{
    Suite *s = suite_create("properties");
    TCase *tc = tcase_create("isa-threads");
    tcase_set_timeout(tc, 1200);
    tcase_add_test(tc, all_isas_and_threads_equal_scalar);
    tcase_add_test(tc, kernels_match_generic_on_random_chunks);
    tcase_add_test(tc, kernels_exact_near_ties);
    tcase_add_test(tc, kernels_grouped_near_ties);
    tcase_add_test(tc, kernels_bf16_match_widened);
    tcase_add_test(tc, kernels_exact_at_code_boundaries);
    tcase_add_test(tc, kernels_match_generic_on_long_chunks);
    tcase_add_test(tc, kernels_dequantize_every_code);
    tcase_add_test(tc, kernels_exact_at_scaled_code_boundaries);
    tcase_add_test(tc, kernels_nf4_margin_edges);
    tcase_add_test(tc, kernels_dequantize_all_byte_codes);
    tcase_add_test(tc, kernels_microscaling_scales_match_generic);
    tcase_add_test(tc, fused_small_tiles_equal_scalar);
    tcase_add_test(tc, kernels_quantize_absmax_match_three_pass);
    tcase_add_test(tc, kernels_e2m1_sampled_floats);
    suite_add_tcase(s, tc);
    return s;
}
