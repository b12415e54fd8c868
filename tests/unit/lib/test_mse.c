/* test_mse.c -- the MSE scale search of SPEC 9: method parsing and its limits, the r_k grid
 * against exact rationals, a hand-checked case, importance changing the winner, ties going to
 * the smaller k, and the search against a reference built from the public single steps
 * (calibrate, compute_scale, quantize_with_scale, dequantize) for every qtype family and tiling,
 * on every ISA and thread count, bit for bit.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdlib.h>

#include "../testutil.h"
#include "internal.h"

START_TEST(mse_parse)
{
    quant_calib_method m;
    quant_error err;
    ck_assert_int_eq(quant_calib_parse("mse", &m, &err), QUANT_OK);
    ck_assert(m.kind == QUANT_CALIB_MSE && !m.asymmetric && m.mse_steps == 20 && m.mse_lo == 0.5);
    ck_assert_int_eq(quant_calib_parse("MSE, 8", &m, &err), QUANT_OK);
    ck_assert(m.mse_steps == 8 && m.mse_lo == 0.5);
    ck_assert_int_eq(quant_calib_parse("minmax_mse,256,0", &m, &err), QUANT_OK);
    ck_assert(m.kind == QUANT_CALIB_MINMAX_MSE && m.asymmetric && m.mse_steps == 256 &&
              m.mse_lo == 0.0);
    ck_assert_int_eq(quant_calib_parse("mse,1,1", &m, &err), QUANT_OK);
    static const char *bad[] = {"mse,0",     "mse,257",    "mse,2.5",     "mse,-1",
                                "mse,4,1.5", "mse,4,-0.1", "mse,4,0.5,1", "minmax_mse,x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(quant_calib_parse(bad[i], &m, &err), QUANT_ERR_METHOD);
        ck_assert_ptr_nonnull(strstr(err.message, "calibration"));
    }
    ck_assert_int_eq(quant_calib_parse("mse,257", &m, &err), QUANT_ERR_METHOD);
    ck_assert_ptr_nonnull(strstr(err.message, "1..256"));
    /* minmax_mse is asymmetric: refused where minmax is; mse is allowed on microscaling */
    quant_how how;
    quant_how_init(&how, QUANT_QTYPE_NF4);
    how.calibration = "minmax_mse";
    ck_assert_int_eq(quant_how_check(&how, &err), QUANT_ERR_ASYMMETRIC);
    quant_how_init(&how, QUANT_QTYPE_MXFP4);
    how.calibration = "mse,10,0.3";
    ck_assert_int_eq(quant_how_check(&how, &err), QUANT_OK);
    how.calibration = "minmax_mse";
    ck_assert_int_eq(quant_how_check(&how, &err), QUANT_ERR_METHOD);
}
END_TEST

__extension__ typedef __int128 i128; /* exact checks need 96 bits (gcc, clang) */

/* |f - r| * n * 2^e as an exact integer, with lo = a * 2^-e and f = m * 2^-E (E <= e). */
static i128 dist(float f, int k, int n, int64_t a, int e)
{
    int E = 0;
    double m = frexp((double)f, &E); /* f = m * 2^E, m in [0.5, 1) */
    int64_t mi = (int64_t)ldexp(m, 24);
    E -= 24; /* f = mi * 2^E */
    i128 fn = (i128)mi * n * ((i128)1 << (e + E));
    i128 r = (i128)(n - k) * ((i128)1 << e) + (i128)k * a;
    i128 d = fn - r;
    return d < 0 ? -d : d;
}

START_TEST(mse_ratio_grid)
{
    /* lo = 0.5, n = 20: r_k nearest to (40 - k) / 40 */
    for (int k = 0; k <= 20; k++) {
        float f = quant_mse_ratio(k, 20, 0.5);
        double d = fabs((double)f * 40 - (40 - k));
        ck_assert(d <= fabs((double)nextafterf(f, 2.0f) * 40 - (40 - k)));
        ck_assert(d <= fabs((double)nextafterf(f, 0.0f) * 40 - (40 - k)));
    }
    ck_assert(quant_mse_ratio(0, 20, 0.5) == 1.0f && quant_mse_ratio(20, 20, 0.5) == 0.5f);
    ck_assert(quant_mse_ratio(10, 20, 0.5) == 0.75f && quant_mse_ratio(4, 20, 0.5) == 0.9f);
    ck_assert(quant_mse_ratio(3, 3, 0.0) == 0.0f && quant_mse_ratio(1, 3, 0.0) == (float)(2.0 / 3));
    ck_assert(isnan(quant_mse_ratio(21, 20, 0.5)) && isnan(quant_mse_ratio(0, 0, 0.5)) &&
              isnan(quant_mse_ratio(1, 2, 1.5)) && isnan(quant_mse_ratio(-1, 2, 0.5)));
    /* random lo in [2^-10, 1) and n: every r_k is the nearest float32 (ties to even), checked
     * with exact integers */
    tu_rng r = {99};
    for (int it = 0; it < tu_iters(300); it++) {
        int e = 53 + (int)tu_below(&r, 10);
        int64_t a = (int64_t)((tu_next(&r) >> 11) | (1ull << 52)); /* 53 bits */
        double lo = ldexp((double)a, -e);
        if (lo >= 1.0) continue;
        int n = 1 + (int)tu_below(&r, 256);
        for (int k = 0; k <= n; k++) {
            float f = quant_mse_ratio(k, n, lo);
            i128 d = dist(f, k, n, a, e);
            i128 du = dist(nextafterf(f, 2.0f), k, n, a, e);
            i128 dd = f > 0 ? dist(nextafterf(f, 0.0f), k, n, a, e) : d + 1;
            ck_assert(d < du || (d == du && !(qn_bits(f) & 1)));
            ck_assert(d < dd || (d == dd && !(qn_bits(f) & 1)));
        }
    }
}
END_TEST

/* int2 (B = 1.5, codes -2..1), x = [3, 1] per tensor, mse,2,0.5: r = 1, 0.75, 0.5.
 *   k = 0: s = 2:   3/2 = 1.5 -> 2 -> clip 1 -> 2 (err 1); 1/2 = 0.5 -> 0 (err 1): 2
 *   k = 1: s = 1.5: 3/1.5 = 2 -> clip 1 -> 1.5 (err 2.25); 0.667 -> 1 -> 1.5 (err .25): 2.5
 *   k = 2: s = 1:   3 -> clip 1 -> 1 (err 4); 1 -> 1 (err 0): 4
 * so k = 0 wins (scale 2). With importance [0, 1] the errors are 1, 0.25, 0: k = 2 (scale 1). */
START_TEST(mse_hand_case)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    for (int i = 0; i < nisa; i++) {
        quant_ctx *ctx = tu_ctx(isas[i], 1);
        float x[2] = {3.0f, 1.0f}, scale = 0;
        int8_t q[2];
        int64_t shape[2] = {1, 2};
        quant_tensor t;
        quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
        quant_how how;
        quant_how_init(&how, QUANT_QTYPE_INT2);
        how.pack = false;
        how.calibration = "mse,2,0.5";
        quant_mse_result res;
        how.mse_out = &res;
        quant_error err;
        ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, &scale, NULL, &err), QUANT_OK);
        ck_assert(scale == 2.0f && q[0] == 1 && q[1] == 0);
        ck_assert(res.err_before == 2.0 && res.err_after == 2.0 && res.groups == 1 &&
                  res.shrunk == 0);
        float w[2] = {0.0f, 1.0f};
        how.importance = w;
        how.importance_len = 2;
        how.importance_axis = -1;
        ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, &scale, NULL, &err), QUANT_OK);
        ck_assert(scale == 1.0f && q[0] == 1 && q[1] == 1);
        ck_assert(res.err_before == 1.0 && res.err_after == 0.0 && res.shrunk == 1);
        /* the calibration itself reports the winner: absmax * r_2 */
        float a = 0;
        quant_calibration cal = {.absmax = &a};
        ck_assert_int_eq(quant_calibrate(ctx, &how, &t, &cal, &err), QUANT_OK);
        ck_assert(a == 1.5f);
        /* importance of the wrong length, negative or NaN: refused */
        how.importance_len = 3;
        ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, &scale, NULL, &err), QUANT_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(err.message, "importance"));
        how.importance_len = 2;
        w[0] = -1.0f;
        ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, &scale, NULL, &err), QUANT_ERR_ARG);
        w[0] = NAN;
        ck_assert_int_eq(quant_quantize(ctx, &how, &t, q, &scale, NULL, &err), QUANT_ERR_ARG);
        quant_ctx_free(ctx);
    }
}
END_TEST

/* Equal errors keep the smaller k: lo = 1 makes every candidate the plain scale; all-zero
 * importance makes every error 0. */
START_TEST(mse_ties)
{
    quant_ctx *ctx = tu_ctx(QUANT_ISA_SCALAR, 1);
    float x[8] = {0.3f, -1.7f, 2.2f, 0.05f, -0.9f, 1.1f, 3.3f, -2.0f}, w[4] = {0};
    int64_t shape[2] = {2, 4};
    quant_tensor t;
    quant_tensor_init(&t, QUANT_DTYPE_F32, 2, shape, x, NULL);
    quant_how how;
    quant_how_init(&how, QUANT_QTYPE_INT4);
    how.n_channel_axes = 1;
    how.channel_axes[0] = 0;
    quant_mse_result res;
    how.mse_out = &res;
    float a[2], plain[2];
    quant_calibration cal = {.absmax = a};
    quant_error err;
    ck_assert_int_eq(quant_calibrate(ctx, &how, &t, &(quant_calibration){.absmax = plain}, &err),
                     QUANT_OK);
    how.calibration = "mse,5,1";
    ck_assert_int_eq(quant_calibrate(ctx, &how, &t, &cal, &err), QUANT_OK);
    ck_assert(a[0] == plain[0] && a[1] == plain[1] && res.shrunk == 0);
    ck_assert(res.err_before == res.err_after && res.err_before > 0);
    how.calibration = "mse,20,0";
    how.importance = w;
    how.importance_len = 4;
    how.importance_axis = 1;
    ck_assert_int_eq(quant_calibrate(ctx, &how, &t, &cal, &err), QUANT_OK);
    ck_assert(a[0] == plain[0] && a[1] == plain[1] && res.shrunk == 0 && res.err_after == 0);
    quant_ctx_free(ctx);
}
END_TEST

/* ---- the search against a reference from the public single steps ----------------------------- */

typedef struct mcase {
    quant_qtype qtype;
    const char *method;
    int rank;
    int64_t shape[3];
    int nch, ch[2];
    int ntile;
    quant_tile tile[2];
    quant_dtype sdt;
    int imp_axis; /* -9: no importance */
} mcase;

static const mcase mcases[] = {
    {QUANT_QTYPE_INT4, "mse", 2, {6, 64}, 1, {0}, 1, {{-1, 32, 0}}, QUANT_DTYPE_F32, -9},
    {QUANT_QTYPE_INT4, "mse,7,0.3", 2, {6, 64}, 1, {0}, 0, {{0}}, QUANT_DTYPE_F32, -1},
    {QUANT_QTYPE_INT8, "minmax_mse,6", 2, {5, 40}, 1, {0}, 1, {{-1, 8, 0}}, QUANT_DTYPE_BF16, -1},
    {QUANT_QTYPE_UINT4, "minmax_mse", 2, {4, 48}, 0, {0}, 0, {{0}}, QUANT_DTYPE_F32, -1},
    {QUANT_QTYPE_INT3,
     "mse,4",
     3,
     {2, 8, 16},
     1,
     {0},
     2,
     {{1, 4, 0}, {2, 8, 0}},
     QUANT_DTYPE_F16,
     1},
    {QUANT_QTYPE_NF4, "mse,10", 2, {8, 32}, 0, {0}, 1, {{0, 4, 0}}, QUANT_DTYPE_F32, 0},
    {QUANT_QTYPE_FP8_E4M3FN, "mse,6,0.1", 2, {4, 24}, 1, {0}, 0, {{0}}, QUANT_DTYPE_F32, -1},
    {QUANT_QTYPE_FP8_E5M2, "mse,3", 2, {3, 16}, 1, {1}, 0, {{0}}, QUANT_DTYPE_F32, 0},
    {QUANT_QTYPE_MXFP4, "mse", 2, {3, 64}, 1, {0}, 1, {{-1, 32, 0}}, QUANT_DTYPE_F32, -1},
    {QUANT_QTYPE_MXFP8, "mse,5", 2, {2, 64}, 1, {0}, 1, {{-1, 32, 0}}, QUANT_DTYPE_F32, -9},
    {QUANT_QTYPE_NVFP4, "mse", 2, {4, 48}, 1, {0}, 1, {{-1, 16, 0}}, QUANT_DTYPE_F32, -1},
    {QUANT_QTYPE_INT16, "mse,2", 2, {3, 1100}, 1, {0}, 0, {{0}}, QUANT_DTYPE_F32, -1},
    /* the fused mse_int path: int2/int4/int8, tiles and per-channel (rows longer than a chunk),
     * candidate counts around the vector widths, importance per column, per row or none */
    {QUANT_QTYPE_INT2, "mse", 2, {6, 64}, 1, {0}, 1, {{-1, 16, 0}}, QUANT_DTYPE_F32, -1},
    {QUANT_QTYPE_INT2, "mse,7,0", 2, {5, 96}, 1, {0}, 1, {{-1, 32, 0}}, QUANT_DTYPE_F32, -9},
    {QUANT_QTYPE_INT4, "mse,100,0.2", 2, {4, 128}, 1, {0}, 1, {{-1, 32, 0}}, QUANT_DTYPE_F32, -1},
    {QUANT_QTYPE_INT4, "mse,16", 2, {3, 1100}, 1, {0}, 0, {{0}}, QUANT_DTYPE_BF16, 0},
    {QUANT_QTYPE_INT4, "mse,15,0.4", 2, {4, 64}, 1, {0}, 1, {{-1, 64, 0}}, QUANT_DTYPE_F32, -9},
    {QUANT_QTYPE_INT8, "mse,31", 2, {4, 256}, 1, {0}, 1, {{-1, 64, 0}}, QUANT_DTYPE_F32, -1},
    {QUANT_QTYPE_INT8, "mse,8,0.01", 2, {3, 1100}, 1, {0}, 0, {{0}}, QUANT_DTYPE_F32, -9},
    {QUANT_QTYPE_INT8, "mse,256,0", 2, {2, 96}, 1, {0}, 1, {{-1, 32, 0}}, QUANT_DTYPE_F16, 0},
};

/* Scale index of flat element f (scale shape ss, tiles shape / ss). */
static int64_t scale_index(const mcase *c, const int64_t *ss, int64_t f)
{
    int64_t idx = 0, mul = 1;
    for (int d = c->rank - 1; d >= 0; d--) {
        int64_t i = f % c->shape[d];
        f /= c->shape[d];
        idx += (i / (c->shape[d] / ss[d])) * mul;
        mul *= ss[d];
    }
    return idx;
}

static int64_t axis_index(const mcase *c, int64_t f, int axis)
{
    int a = axis < 0 ? axis + c->rank : axis;
    for (int d = c->rank - 1; d > a; d--) f /= c->shape[d];
    return f % c->shape[a];
}

typedef struct ref_out {
    float cal_a[512], cal_b[512];
    double before, after;
    int64_t shrunk;
} ref_out;

/* The reference: every candidate over the whole tensor through the public steps. */
static void reference(const mcase *c, const quant_how *base, const quant_tensor *t, const float *w,
                      const int64_t *ss, int64_t ns, ref_out *out)
{
    quant_ctx *ctx = tu_ctx(QUANT_ISA_SCALAR, 1);
    quant_calib_method m;
    quant_calib_parse(c->method, &m, NULL);
    quant_how how = *base;
    how.calibration = m.asymmetric ? "minmax" : "absmax";
    how.mse_out = NULL;
    if (c->qtype == QUANT_QTYPE_NVFP4) {
        float amax = 0;
        ck_assert_int_eq(quant_absmax_all(ctx, t, &amax, NULL), QUANT_OK);
        how.global_scale = quant_nvfp4_global_scale(amax);
    }
    static float a0[512], b0[512], ca[512], cb[512], sc[512];
    static double err[512], best[512];
    static int bestk[512];
    static int32_t zp[512];
    quant_calibration plain = {m.asymmetric, a0, a0, b0};
    ck_assert_int_eq(quant_calibrate(ctx, &how, t, &plain, NULL), QUANT_OK);
    int64_t n = quant_numel(c->rank, c->shape);
    float *d = malloc((size_t)n * sizeof *d);
    void *q = malloc((size_t)n * 2);
    int64_t qb = quant_qvalue_bytes(&how, c->rank, c->shape);
    ck_assert(qb <= n * 2);
    for (int k = 0; k <= m.mse_steps; k++) {
        float r = quant_mse_ratio(k, m.mse_steps, m.mse_lo);
        for (int64_t g = 0; g < ns; g++) {
            ca[g] = a0[g] * r;
            cb[g] = b0[g] * r;
        }
        quant_calibration cand = {m.asymmetric, ca, ca, cb};
        ck_assert_int_eq(quant_compute_scale(&how, &cand, ns, sc, m.asymmetric ? zp : NULL, NULL),
                         QUANT_OK);
        ck_assert_int_eq(
            quant_quantize_with_scale(ctx, &how, t, sc, m.asymmetric ? zp : NULL, q, NULL),
            QUANT_OK);
        quant_tensor dt;
        quant_tensor_init(&dt, QUANT_DTYPE_F32, c->rank, c->shape, d, NULL);
        ck_assert_int_eq(quant_dequantize(ctx, &how, q, sc, m.asymmetric ? zp : NULL, &dt, NULL),
                         QUANT_OK);
        for (int64_t g = 0; g < ns; g++) err[g] = 0;
        const float *x = t->data;
        for (int64_t f = 0; f < n; f++) { /* flat order is each group's element order */
            double e = (double)x[f] - (double)d[f];
            double wf = w ? (double)w[axis_index(c, f, c->imp_axis)] : 1.0;
            err[scale_index(c, ss, f)] += wf * (e * e);
        }
        for (int64_t g = 0; g < ns; g++) {
            if (k == 0 || err[g] < best[g]) {
                best[g] = err[g];
                bestk[g] = k;
                out->cal_a[g] = ca[g];
                out->cal_b[g] = cb[g];
            }
        }
        if (k == 0) {
            out->before = 0;
            for (int64_t g = 0; g < ns; g++) out->before += err[g];
        }
    }
    out->after = 0;
    out->shrunk = 0;
    for (int64_t g = 0; g < ns; g++) {
        out->after += best[g];
        out->shrunk += bestk[g] > 0;
    }
    free(d);
    free(q);
    quant_ctx_free(ctx);
}

START_TEST(mse_matches_reference)
{
    const mcase *c = &mcases[_i];
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng rng = {1000 + (uint64_t)_i};
    int64_t n = quant_numel(c->rank, c->shape);
    float *x = malloc((size_t)n * sizeof *x);
    tu_fill(&rng, x, n, 1.5f, 1);
    quant_tensor t;
    quant_tensor_init(&t, QUANT_DTYPE_F32, c->rank, c->shape, x, NULL);
    quant_how how;
    quant_how_init(&how, c->qtype);
    how.n_channel_axes = c->nch;
    for (int i = 0; i < c->nch; i++) how.channel_axes[i] = c->ch[i];
    how.n_tiles = c->ntile;
    for (int i = 0; i < c->ntile; i++) how.tiles[i] = c->tile[i];
    how.scale_dtype = c->sdt;
    how.calibration = c->method;
    float w[1100];
    if (c->imp_axis != -9) {
        int a = c->imp_axis < 0 ? c->imp_axis + c->rank : c->imp_axis;
        for (int64_t i = 0; i < c->shape[a]; i++)
            w[i] = tu_below(&rng, 4) == 0 ? 0.0f : fabsf(tu_normal(&rng, 2.0f));
        how.importance = w;
        how.importance_len = c->shape[a];
        how.importance_axis = c->imp_axis;
    }
    int64_t ss[3];
    quant_error err;
    ck_assert_msg(quant_scale_shape(&how, c->rank, c->shape, ss, &err) == QUANT_OK, "%s",
                  err.message);
    int64_t ns = quant_numel(c->rank, ss);
    ck_assert(ns <= 512);
    static ref_out ref;
    reference(c, &how, &t, how.importance, ss, ns, &ref);
    /* the coarse grids must find something better than the plain scale */
    ck_assert_msg(ref.shrunk > 0 || quant_qtype_traits_get(c->qtype)->bits > 4,
                  "case %d: nothing shrunk", _i);
    quant_calib_method m;
    quant_calib_parse(c->method, &m, NULL);
    for (int i = 0; i < nisa; i++) {
        for (int threads = 1; threads <= 3; threads += 2) {
            quant_ctx *ctx = tu_ctx(isas[i], threads);
            static float a[512], b[512];
            quant_mse_result res;
            how.mse_out = &res;
            quant_calibration cal = {m.asymmetric, a, a, b};
            ck_assert_msg(quant_calibrate(ctx, &how, &t, &cal, &err) == QUANT_OK, "%s",
                          err.message);
            for (int64_t g = 0; g < ns; g++) {
                ck_assert_msg(qn_bits(a[g]) == qn_bits(ref.cal_a[g]),
                              "case %d isa %s threads %d group %lld: %a vs %a", _i,
                              quant_isa_name(isas[i]), threads, (long long)g, (double)a[g],
                              (double)ref.cal_a[g]);
                if (m.asymmetric) ck_assert(qn_bits(b[g]) == qn_bits(ref.cal_b[g]));
            }
            ck_assert(res.err_before == ref.before && res.err_after == ref.after &&
                      res.shrunk == ref.shrunk && res.groups == ns);
            ck_assert(res.err_after <= res.err_before);
            /* quantize uses the winners: same as quantize_with_scale on their scales */
            static float s1[512];
            static int32_t z1[512];
            void *q1 = malloc((size_t)n * 2);
            ck_assert_int_eq(quant_quantize(ctx, &how, &t, q1, s1, z1, &err), QUANT_OK);
            static float s2[512];
            static int32_t z2[512];
            quant_how h2 = how;
            if (c->qtype == QUANT_QTYPE_NVFP4) {
                float amax = 0;
                quant_absmax_all(ctx, &t, &amax, NULL);
                h2.global_scale = quant_nvfp4_global_scale(amax);
            }
            ck_assert_int_eq(quant_compute_scale(&h2, &cal, ns, s2, z2, &err), QUANT_OK);
            for (int64_t g = 0; g < ns; g++) {
                ck_assert(qn_bits(s1[g]) == qn_bits(s2[g]));
                if (m.asymmetric) ck_assert_int_eq(z1[g], z2[g]);
            }
            void *q2 = malloc((size_t)n * 2);
            ck_assert_int_eq(
                quant_quantize_with_scale(ctx, &h2, &t, s2, m.asymmetric ? z2 : NULL, q2, &err),
                QUANT_OK);
            int64_t qb = quant_qvalue_bytes(&how, c->rank, c->shape);
            ck_assert(memcmp(q1, q2, (size_t)qb) == 0);
            free(q2);
            free(q1);
            quant_ctx_free(ctx);
        }
    }
    free(x);
}
END_TEST

/* Every ISA's error sums (kernel table mse_acc) equal the generic ones bit for bit: ragged
 * chunks, groups cut by the chunk's ends, 1..QUANT_MSE_BATCH candidates, zero weights. */
START_TEST(mse_acc_isas)
{
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    enum { N = 1024 };
    static float x[N], d[QUANT_MSE_BATCH * N], w[N];
    static double e0[QUANT_MSE_BATCH * 64], e1[QUANT_MSE_BATCH * 64];
    static const int64_t tiles[] = {1, 3, 7, 32, 100, 5000};
    tu_rng r = {4242};
    for (int it = 0; it < tu_iters(200); it++) {
        int64_t n = 1 + tu_below(&r, N), tile = tiles[tu_below(&r, 6)];
        int64_t c0 = tu_below(&r, 3 * tile), es = (c0 + n - 1) / tile + 1;
        if (es > 64) {
            tile = (c0 + n + 63) / 64 + 1; /* keep the groups in the buffers */
            es = (c0 + n - 1) / tile + 1;
        }
        int nk = 1 + (int)tu_below(&r, QUANT_MSE_BATCH);
        tu_fill(&r, x, n, 2.0f, 1);
        tu_fill(&r, d, (int64_t)nk * N, 2.0f, 1);
        for (int64_t j = 0; j < n; j++) w[j] = tu_below(&r, 5) ? fabsf(tu_normal(&r, 3.0f)) : 0.0f;
        for (int64_t i = 0; i < nk * es; i++) e0[i] = (double)i * 0.25;
        quant_kernels_generic.mse_acc(x, d, N, nk, w, n, c0, tile, e0, es);
        for (int i = 0; i < nisa; i++) {
            const quant_kernels *k = quant_kernels_for(isas[i]);
            ck_assert_ptr_nonnull(k);
            for (int64_t g = 0; g < nk * es; g++) e1[g] = (double)g * 0.25;
            k->mse_acc(x, d, N, nk, w, n, c0, tile, e1, es);
            ck_assert_msg(memcmp(e0, e1, (size_t)(nk * es) * sizeof *e0) == 0,
                          "isa %s n %lld c0 %lld tile %lld nk %d", quant_isa_name(isas[i]),
                          (long long)n, (long long)c0, (long long)tile, nk);
        }
        /* and the generic sums are the formula in element order */
        for (int k = 0; k < nk; k++)
            for (int64_t g = 0; g < es; g++) {
                double a = (double)(k * es + g) * 0.25;
                for (int64_t j = 0; j < n; j++) {
                    if ((c0 + j) / tile != g) continue;
                    double e = (double)x[j] - (double)d[k * N + j];
                    a += (double)w[j] * (e * e);
                }
                ck_assert(a == e0[k * es + g]);
            }
    }
}
END_TEST

/* Every ISA's fused mse_int equals the unfused path (the generic quantize, dequantize and
 * mse_acc) bit for bit: int2..int16 and uint4 bounds, 1..257 candidates (vector tails), ragged
 * chunks and groups, scales from the group's absmax shrunk, 1 (an invalid candidate) and tiny
 * (quotients far past the bounds), zero weights, no weights (NULL). */
START_TEST(mse_int_isas)
{
    static const float bounds[][2] = {{-2, 1}, {-8, 7}, {-128, 127}, {0, 15}, {-32768, 32767}};
    static const quant_kcode kcs[] = {QK_I8, QK_I8, QK_I8, QK_U8, QK_I16};
    static const int64_t tiles[] = {1, 16, 32, 64, 100, 5000};
    enum { N = 1024, K = 257, G = 64 };
    static float x[N], w[N], sc[K * G], d[N];
    static int16_t codes[N];
    static double e0[K * G], e1[K * G];
    quant_isa isas[QUANT_ISA_COUNT];
    int nisa = tu_isas(isas);
    tu_rng r = {777};
    for (int it = 0; it < tu_iters(120); it++) {
        int bi = (int)tu_below(&r, 5);
        float qmin = bounds[bi][0], qmax = bounds[bi][1];
        int64_t n = 1 + tu_below(&r, N), tile = tiles[tu_below(&r, 6)];
        int64_t c0 = tu_below(&r, 3 * tile), es = (c0 + n - 1) / tile + 1;
        if (es > G) {
            tile = (c0 + n + G - 1) / G + 1;
            es = (c0 + n - 1) / tile + 1;
        }
        int nk = tu_below(&r, 3) ? 1 + (int)tu_below(&r, 40) : 1 + (int)tu_below(&r, K);
        tu_fill(&r, x, n, 2.0f, 1);
        bool unit = tu_below(&r, 3) == 0; /* w NULL: all weights 1 */
        for (int64_t j = 0; j < n; j++)
            w[j] = unit ? 1.0f : tu_below(&r, 5) ? fabsf(tu_normal(&r, 3.0f)) : 0.0f;
        for (int k = 0; k < nk; k++)
            for (int64_t g = 0; g < es; g++) {
                int64_t pick = tu_below(&r, 10);
                float s = fabsf(tu_normal(&r, 6.0f)) / qmax * (1.0f - (float)k / (float)(nk + 1));
                sc[k * es + g] = pick == 0 ? 1.0f : pick == 1 ? 0x1p-40f : s > 0x1p-63f ? s : 1.0f;
            }
        for (int64_t i = 0; i < nk * es; i++) e0[i] = (double)i * 0.125;
        for (int k = 0; k < nk; k++) { /* the unfused path, one candidate at a time */
            quant_krow kr = {.kcode = kcs[bi],
                             .tile = tile,
                             .scale = sc + k * es,
                             .qmin = qmin,
                             .qmax = qmax,
                             .pf_elem = 4,
                             .checked = true};
            quant_generic_quantize(&kr, x, n, c0, codes);
            quant_generic_dequantize(&kr, codes, n, c0, d);
            quant_generic_mse_acc(x, d, N, 1, w, n, c0, tile, e0 + k * es, es);
        }
        for (int i = 0; i < nisa; i++) {
            const quant_kernels *kt = quant_kernels_for(isas[i]);
            /* optional in the table, but every kernel set has it (NEON: lib/arch/driver_body.h) */
            ck_assert_msg(kt->mse_int != NULL, "%s has no fused MSE kernel",
                          quant_isa_name(isas[i]));
            for (int64_t g = 0; g < nk * es; g++) e1[g] = (double)g * 0.125;
            kt->mse_int(x, unit ? NULL : w, n, c0, tile, sc, nk, es, qmin, qmax, e1);
            ck_assert_msg(memcmp(e0, e1, (size_t)(nk * es) * sizeof *e0) == 0,
                          "isa %s bounds %g..%g n %lld c0 %lld tile %lld nk %d",
                          quant_isa_name(isas[i]), (double)qmin, (double)qmax, (long long)n,
                          (long long)c0, (long long)tile, nk);
        }
    }
}
END_TEST

Suite *suite_mse(void)
{
    Suite *s = suite_create("mse");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, mse_parse);
    tcase_add_test(tc, mse_ratio_grid);
    tcase_add_test(tc, mse_hand_case);
    tcase_add_test(tc, mse_ties);
    tcase_add_test(tc, mse_acc_isas);
    tcase_add_test(tc, mse_int_isas);
    tcase_add_loop_test(tc, mse_matches_reference, 0, (int)(sizeof mcases / sizeof mcases[0]));
    suite_add_tcase(s, tc);
    return s;
}
