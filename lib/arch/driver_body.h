/* driver_body.h -- the quantize driver of the SIMD kernel files, written once and compiled once
 * per target (the pattern of zstd's HUF_DGEN): the reciprocal path with its exact-division tie
 * check (../recip_contract.h) and NF4's threshold margin, blocks of four vectors, the redo list of
 * near lanes, one column group at a time (quantize_seg) or many small groups per sub-chunk
 * (grouped, grouped_kc), tiles smaller than a vector (small_tiles: 2..8 lanes of a scale by the
 * division), the one-pass absmax kernel for tiles 16/32/64 (quantize_absmax), the fused MSE
 * search over integer codes (mse_int), and the error sums of the quality measurement (errstats,
 * and errstats_codes straight from integer codes). The tie logic lives here only. What it serves:
 *   kernels_avx2.c (8 lanes) and kernels_neon.c (4 lanes): quantize, quantize_absmax, mse_int,
 *   errstats, errstats_codes;
 *   kernels_avx512.c (16 lanes, QD_QUANTIZE_ONLY): quantize but for symmetric integer tiles of 64
 *   and more (its division path), with NF4 by the reciprocal (QD_NF4_RECIP); its one-pass, MSE,
 *   bf16 and streaming kernels are its own.
 * The algorithm, its tie logic and its order of operations are the same on every target, so each
 * is bit-identical to kernels_generic.c as the other is.
 *
 * What the including file defines first (inline functions, or macros naming an intrinsic):
 *   QD_W (macro)             lanes per vector (a power of two, 4 or more)
 *   qd_vf, qd_vi, qd_vm      float vector; int32 vector (codes, and the bits of |x|); the
 *                            accumulator of near lanes
 *   qd_load(p), qd_store(p, v), qd_set1(f), qd_bcast(p)    float lanes (qd_bcast: *p in all)
 *   qd_add, qd_sub, qd_mul, qd_div (IEEE, never contracted), qd_abs
 *   qd_clip_nan(v, lo, hi)   min(max(v, lo), hi) with a NaN v kept NaN
 *   qd_rint(v)               round half to even
 *   qd_tiny_one(s)           s < QN_TINY_SCALE ? 1 : s (SPEC 4's tiny rule, lane by lane)
 *   qd_near_none()           an accumulator with no lane noted
 *   qd_note(acc, d, limit)   acc with the lanes where d >= limit, or unordered, noted
 *   qd_any(acc)              some lane is noted
 *   qd_cvt(k)                int32 lanes of exact integers k
 *   qd_zp(p)                 float lanes of the int32 zero points p[0..QD_W)
 *   qd_codes(kc, v, lo, hi)  int32 codes of v (already divided and offset) for the code kind
 *   qd_bounded_codes(v, lo, hi)   integer codes of v known to be within [lo - 1, hi + 1]:
 *                            rounded half to even, converted, clipped to the int32 lo..hi
 *   qd_store_blk(kc, dst, a, b, c, d), qd_store_vec(kc, dst, a)   narrow and store 4 / 1 vectors
 *   qd_prefetch(pf, pf_elem, j)   prefetch the next row's source of the 4 * QD_W values at j
 *   qd_abs_bits(v), qd_max_bits(a, b)   |v| as int32 bits (they order like the values), and max
 *   qd_hmax_groups(m)        from m[QD_W], lane i = max of the lanes of m[i]
 *   qd_bits_f(b)             the float lanes of bits b
 *   qd_lane_of(s, i)         lane i of s in every lane
 *   qd_spread(p, tile)       lane i = p[i / tile], reading p[0 .. QD_W / tile) only (tile a
 *                            compile-time power of two below QD_W)
 *   qd_mse_lanes(x, w, unit, j, end, sv, av, lo, hi)   the MSE search's terms of elements
 *                            [j, end) for the QD_W candidate scales sv, added to the float64
 *                            sums av[0..QD_W) (see quant_mse_int_fn; `unit`: w not read)
 *   seg_absmax_bits(x, len)  max |x| bits over x[0..len)
 * and for the error sums (QUANT_ERR_LANES double lanes as QUANT_ERR_LANES / QD_W * 2 vectors):
 *   qd_vd                    a vector of QD_W / 2 doubles
 *   qd_d_zero(), qd_d_store(p, v), qd_d_add, qd_d_sub, qd_d_mul (IEEE, never contracted), qd_d_abs
 *   qd_d_max(a, b)           a > b ? a : b lane by lane (a NaN a gives b, a NaN b gives b)
 *   qd_d_lo(v), qd_d_hi(v)   the doubles of lanes [0, QD_W / 2) and [QD_W / 2, QD_W) of float v
 *   qd_lanes_below(k)        a qd_vm whose lanes i < k (0 <= k <= QD_W) are set, for qd_pick
 *   qd_pick(m, a, b)         lanes of a where m is set, of b elsewhere
 *   qd_int_levels(kc, c)     the float levels of the QD_W integer codes (kc I8, U8, I16) at c
 *   qd_src(x, bf16, j)       float lanes of x[j..j + QD_W): float32, or bf16 widened exactly
 *   QD_NF4_RECIP (optional macro) with qd_nf4_cell(v, &thr): NF4 codes of v and, per lane, the
 *                            one threshold that may lie within QD_NF4_MARGIN of v (+Inf if none)
 *   QD_QUANTIZE_ONLY (optional macro): only qd_quantize; qd_tiny_one, qd_bounded_codes,
 *                            qd_abs_bits .. qd_mse_lanes and the error sums' primitives are then
 *                            not needed (kernels_avx512.c keeps its own 8-double-lane errstats)
 * It then has qd_quantize, and unless QD_QUANTIZE_ONLY also qd_quantize_absmax, qd_mse_int,
 * qd_errstats and qd_errstats_codes, for its kernel table.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QUANT_DRIVER_BODY_H
#define QUANT_DRIVER_BODY_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "recip_contract.h"

#define QD_BLK (4 * QD_W) /* values per block: four vectors */
#define QD_SUB 2048       /* elements per sub-chunk of the grouped path: bounds its tables */

ALWAYS_INLINE size_t qd_csize(quant_kcode kc)
{
    return kc == QK_I16 ? 2 : 1;
}

/* ---- the exact-division tie check (recip_contract.h) ----------------------------------------- */

/* Rounded and clipped value of b = x * r [+ z]; notes in *near the lanes too close to a tie for
 * the reciprocal's code to be the division's. A NaN b stays NaN through the clip and compares
 * unordered: it is noted too. */
ALWAYS_INLINE qd_vf qd_recip_round(qd_vf x, qd_vf r, qd_vf z, const bool asym, qd_vf qmin,
                                   qd_vf qmax, qd_vf limit, qd_vm *near)
{
    qd_vf b = qd_mul(x, r);
    if (asym) b = qd_add(b, z);
    b = qd_clip_nan(b, qmin, qmax);
    qd_vf k = qd_rint(b);
    *near = qd_note(*near, qd_abs(qd_sub(b, k)), limit);
    return k;
}

/* Codes of one vector by the IEEE division: x / s [+ z]. */
ALWAYS_INLINE qd_vi qd_divide(quant_kcode kc, const float *x, qd_vf s, qd_vf z, const bool asym,
                              qd_vf qmin, qd_vf qmax)
{
    qd_vf v = qd_div(qd_load(x), s);
    if (asym) v = qd_add(v, z);
    return qd_codes(kc, v, qmin, qmax);
}

/* The IEEE path for one block. */
ALWAYS_INLINE void qd_divide_blk(quant_kcode kc, const float *x, qd_vf s, qd_vf z, const bool asym,
                                 qd_vf qmin, qd_vf qmax, uint8_t *out)
{
    qd_store_blk(kc, out, qd_divide(kc, x, s, z, asym, qmin, qmax),
                 qd_divide(kc, x + QD_W, s, z, asym, qmin, qmax),
                 qd_divide(kc, x + 2 * QD_W, s, z, asym, qmin, qmax),
                 qd_divide(kc, x + 3 * QD_W, s, z, asym, qmin, qmax));
}

/* ---- one column group with one scale --------------------------------------------------------- */

/* Blocks of integer codes through the reciprocal path; a block with a value too close to a tie
 * is redone with the division. `asym` is a compile-time constant at each call. */
ALWAYS_INLINE void qd_int_blocks(quant_kcode kc, const float *x, int64_t nb, float sc, float rc,
                                 qd_vf z, qd_vf qmin, qd_vf qmax, uint8_t *out, const char *pf,
                                 int64_t pf_elem, const bool asym)
{
    const size_t csize = qd_csize(kc);
    const qd_vf s = qd_set1(sc), r = qd_set1(rc), limit = qd_set1(qk_tie_limit(kc));
    for (int64_t j = 0; j < nb; j += QD_BLK) {
        qd_prefetch(pf, pf_elem, j);
        qd_vm near = qd_near_none();
        const float *xj = x + j;
        qd_vf k0 = qd_recip_round(qd_load(xj), r, z, asym, qmin, qmax, limit, &near);
        qd_vf k1 = qd_recip_round(qd_load(xj + QD_W), r, z, asym, qmin, qmax, limit, &near);
        qd_vf k2 = qd_recip_round(qd_load(xj + 2 * QD_W), r, z, asym, qmin, qmax, limit, &near);
        qd_vf k3 = qd_recip_round(qd_load(xj + 3 * QD_W), r, z, asym, qmin, qmax, limit, &near);
        if (__builtin_expect(!qd_any(near), 1))
            qd_store_blk(kc, out + j * csize, qd_cvt(k0), qd_cvt(k1), qd_cvt(k2), qd_cvt(k3));
        else
            qd_divide_blk(kc, xj, s, z, asym, qmin, qmax, out + j * csize);
    }
}

#ifdef QD_NF4_RECIP
/* NF4 (no zero point) by the reciprocal too. With q = x / s exactly, b = fl(x * r) and
 * v = fl(x / s) differ by at most |q| (3 * 2^-24 + 2^-48) + 2^-149 < 2^-21 when |q| <= 2, and
 * index(b) = index(v) unless a threshold lies between them, hence within 2^-21 of b. The
 * including file's qd_nf4_cell gives b's code and the one threshold that may lie that close
 * (every other is farther than QD_NF4_MARGIN = 2^-20 from b); b's code is kept when that one is
 * farther than the margin too. When |q| > 2, b and v both lie beyond +-1, past every threshold.
 * Lanes within the margin, and unordered ones (b NaN), take the division. */
#define QD_NF4_MARGIN 0x1p-20f

ALWAYS_INLINE qd_vi qd_nf4_recip(qd_vf x, qd_vf r, qd_vf margin, qd_vm *near)
{
    qd_vf b = qd_mul(x, r), thr;
    qd_vi k = qd_nf4_cell(b, &thr);
    *near = qd_note(*near, margin, qd_abs(qd_sub(b, thr)));
    return k;
}

/* Blocks of NF4 codes through the reciprocal; a block with a lane near a threshold is redone
 * with the division. */
ALWAYS_INLINE void qd_nf4_blocks(const float *x, int64_t nb, float sc, float rc, uint8_t *out,
                                 const char *pf, int64_t pf_elem)
{
    const qd_vf s = qd_set1(sc), r = qd_set1(rc), margin = qd_set1(QD_NF4_MARGIN);
    const qd_vf zero = qd_set1(0.0f);
    for (int64_t j = 0; j < nb; j += QD_BLK) {
        qd_prefetch(pf, pf_elem, j);
        qd_vm near = qd_near_none();
        const float *xj = x + j;
        qd_vi k0 = qd_nf4_recip(qd_load(xj), r, margin, &near);
        qd_vi k1 = qd_nf4_recip(qd_load(xj + QD_W), r, margin, &near);
        qd_vi k2 = qd_nf4_recip(qd_load(xj + 2 * QD_W), r, margin, &near);
        qd_vi k3 = qd_nf4_recip(qd_load(xj + 3 * QD_W), r, margin, &near);
        if (__builtin_expect(!qd_any(near), 1))
            qd_store_blk(QK_NF4, out + j, k0, k1, k2, k3);
        else
            qd_divide_blk(QK_NF4, xj, s, zero, false, zero, zero, out + j);
    }
}
#endif

/* Blocks of codes by the IEEE division (fp8, nf4, e2m1, and scales whose reciprocal is not a
 * normal float). */
ALWAYS_INLINE void qd_div_blocks(quant_kcode kc, const float *x, int64_t nb, float sc, qd_vf z,
                                 const bool asym, qd_vf qmin, qd_vf qmax, uint8_t *out,
                                 const char *pf, int64_t pf_elem)
{
    const size_t csize = qd_csize(kc);
    const qd_vf s = qd_set1(sc);
    for (int64_t j = 0; j < nb; j += QD_BLK) {
        qd_prefetch(pf, pf_elem, j);
        qd_divide_blk(kc, x + j, s, z, asym, qmin, qmax, out + j * csize);
    }
}

/* One column group with a shared scale `sc`: codes for x[0..len) in blocks, then vectors;
 * returns the count handled (the rest is left for a scalar tail). */
ALWAYS_INLINE int64_t qd_quantize_seg(quant_kcode kc, const float *x, int64_t len, float sc,
                                      float rc, qd_vf z, const bool asym, qd_vf qmin, qd_vf qmax,
                                      uint8_t *out, const char *pf, int64_t pf_elem)
{
    const size_t csize = qd_csize(kc);
    int64_t nb = len & ~(int64_t)(QD_BLK - 1), j = nb;
    if (qk_is_int(kc) && qk_recip_usable(sc))
        qd_int_blocks(kc, x, nb, sc, rc, z, qmin, qmax, out, pf, pf_elem, asym);
#ifdef QD_NF4_RECIP
    else if (kc == QK_NF4 && !asym && qk_recip_usable(sc))
        qd_nf4_blocks(x, nb, sc, rc, out, pf, pf_elem);
#endif
    else
        qd_div_blocks(kc, x, nb, sc, z, asym, qmin, qmax, out, pf, pf_elem);
    const qd_vf s = qd_set1(sc);
    for (; j + QD_W <= len; j += QD_W)
        qd_store_vec(kc, out + j * csize, qd_divide(kc, x + j, s, z, asym, qmin, qmax));
    return j;
}

/* ---- chunks whose column groups are whole vectors (tile % QD_W == 0, c0 % QD_W == 0) --------- */

/* Advances to the group of the next `width` elements (tile % width == 0). */
ALWAYS_INLINE int64_t qd_next_group(int64_t *g, int64_t *left, int64_t tile, int64_t width)
{
    if (*left == 0) {
        (*g)++;
        *left = tile;
    }
    *left -= width;
    return *g;
}

/* One vector of the grouped path: its scale, zero point and, on the reciprocal path, its
 * rounded value and near lanes. */
typedef struct qd_lane {
    qd_vf s, z, k;
    qd_vm near;
} qd_lane;

ALWAYS_INLINE qd_lane qd_lane_at(const quant_krow *r, const float *x, int64_t gi,
                                 const float *recip, const float *zpf, int64_t g0, qd_vf qmin,
                                 qd_vf qmax, qd_vf limit, const bool asym, const bool use_recip)
{
    qd_lane l;
    l.s = qd_bcast(r->scale + gi);
    l.z = asym ? qd_bcast(zpf + gi - g0) : qd_set1(0.0f);
    l.near = qd_near_none();
    l.k = use_recip ? qd_recip_round(qd_load(x), qd_bcast(recip + gi - g0), l.z, asym, qmin, qmax,
                                     limit, &l.near)
                    : l.s;
    return l;
}

/* Notes vector j (element offset) for the division pass when one of its values is near a tie,
 * without a branch: half the column groups hold one (their negative absmax element lands on
 * -B = qmin + 0.5), too often and too irregularly for a well-predicted branch. */
ALWAYS_INLINE void qd_note_redo(qd_lane l, int64_t j, int32_t *redo, int *nredo)
{
    redo[*nredo] = (int32_t)j;
    *nredo += qd_any(l.near);
}

/* Codes for x[0..nv) (nv % QD_W == 0) of one sub-chunk. recip[] and zpf[] hold, per group from
 * g0, 1/scale (NaN when the reciprocal is unusable) and the zero point as a float. `asym`,
 * `use_recip` and `per_block` (tile % QD_BLK == 0 and c0 % QD_BLK == 0: one group per block) are
 * compile-time constants at each call. */
ALWAYS_INLINE void qd_grouped(quant_kcode kc, const quant_krow *r, const float *x, int64_t nv,
                              int64_t c0, const float *recip, const float *zpf, int64_t g0,
                              uint8_t *out, const bool asym, const bool use_recip,
                              const bool per_block)
{
    const size_t csize = qd_csize(kc);
    const qd_vf qmin = qd_set1(r->qmin), qmax = qd_set1(r->qmax);
    const qd_vf limit = qd_set1(qk_tie_limit(kc));
    const int64_t tile = r->tile;
    int64_t g = c0 / tile, left = (g + 1) * tile - c0, j = 0;
    int32_t redo[QD_SUB / QD_W + 1];
    int nredo = 0;
    for (; j + QD_BLK <= nv; j += QD_BLK) {
        qd_prefetch(r->pf, r->pf_elem, j);
        int64_t ga = qd_next_group(&g, &left, tile, per_block ? QD_BLK : QD_W);
        int64_t gb = per_block ? ga : qd_next_group(&g, &left, tile, QD_W);
        int64_t gc = per_block ? ga : qd_next_group(&g, &left, tile, QD_W);
        int64_t gd = per_block ? ga : qd_next_group(&g, &left, tile, QD_W);
        const float *xj = x + j;
        qd_lane a = qd_lane_at(r, xj, ga, recip, zpf, g0, qmin, qmax, limit, asym, use_recip);
        qd_lane b =
            qd_lane_at(r, xj + QD_W, gb, recip, zpf, g0, qmin, qmax, limit, asym, use_recip);
        qd_lane c =
            qd_lane_at(r, xj + 2 * QD_W, gc, recip, zpf, g0, qmin, qmax, limit, asym, use_recip);
        qd_lane d =
            qd_lane_at(r, xj + 3 * QD_W, gd, recip, zpf, g0, qmin, qmax, limit, asym, use_recip);
        if (use_recip) {
            qd_store_blk(kc, out + j * csize, qd_cvt(a.k), qd_cvt(b.k), qd_cvt(c.k), qd_cvt(d.k));
            qd_note_redo(a, j, redo, &nredo);
            qd_note_redo(b, j + QD_W, redo, &nredo);
            qd_note_redo(c, j + 2 * QD_W, redo, &nredo);
            qd_note_redo(d, j + 3 * QD_W, redo, &nredo);
        } else {
            qd_store_blk(kc, out + j * csize, qd_divide(kc, xj, a.s, a.z, asym, qmin, qmax),
                         qd_divide(kc, xj + QD_W, b.s, b.z, asym, qmin, qmax),
                         qd_divide(kc, xj + 2 * QD_W, c.s, c.z, asym, qmin, qmax),
                         qd_divide(kc, xj + 3 * QD_W, d.s, d.z, asym, qmin, qmax));
        }
    }
    for (; j < nv; j += QD_W) {
        int64_t gi = qd_next_group(&g, &left, tile, QD_W);
        qd_vf z = asym ? qd_bcast(zpf + gi - g0) : qd_set1(0.0f);
        qd_store_vec(kc, out + j * csize,
                     qd_divide(kc, x + j, qd_bcast(r->scale + gi), z, asym, qmin, qmax));
    }
    /* the division pass over the vectors noted near a tie */
    for (int i = 0; i < nredo; i++) {
        int64_t at = redo[i], gi = (c0 + at) / tile;
        qd_vf z = asym ? qd_bcast(zpf + gi - g0) : qd_set1(0.0f);
        qd_store_vec(kc, out + at * csize,
                     qd_divide(kc, x + at, qd_bcast(r->scale + gi), z, asym, qmin, qmax));
    }
}

/* The grouped path's tables for groups g0..g1: 1/scale (NaN when the reciprocal may not be
 * used: !qk_recip_usable), the reciprocals QD_W at a time by one vector division, and the zero
 * points as floats. */
ALWAYS_INLINE void qd_group_tables(const quant_krow *r, int64_t g0, int64_t g1, float *recip,
                                   float *zpf)
{
    int64_t g = g0;
    for (; g + QD_W - 1 <= g1; g += QD_W)
        qd_store(recip + (g - g0), qd_div(qd_set1(1.0f), qd_load(r->scale + g)));
    for (; g <= g1; g++) recip[g - g0] = 1.0f / r->scale[g];
    for (g = g0; g <= g1; g++) {
        if (!qk_recip_usable(r->scale[g])) recip[g - g0] = __builtin_nanf("");
        zpf[g - g0] = r->zp ? (float)r->zp[g] : 0.0f;
    }
}

ALWAYS_INLINE void qd_grouped_kc(quant_kcode kc, const quant_krow *r, const float *x, int64_t n,
                                 int64_t c0, uint8_t *out)
{
    const size_t csize = qd_csize(kc);
    const bool is_int = qk_is_int(kc);
    float recip[QD_SUB / QD_W + 2], zpf[QD_SUB / QD_W + 2];
    for (int64_t j0 = 0; j0 < n; j0 += QD_SUB) {
        int64_t m = n - j0 < QD_SUB ? n - j0 : QD_SUB, mv = m & ~(int64_t)(QD_W - 1), cj = c0 + j0;
        int64_t g0 = cj / r->tile, g1 = (cj + m - 1) / r->tile;
        qd_group_tables(r, g0, g1, recip, zpf);
        const float *xj = x + j0;
        uint8_t *oj = out + j0 * csize;
        quant_krow sub = *r; /* prefetch addresses follow the sub-chunk */
        if (sub.pf) sub.pf += j0 * sub.pf_elem;
        bool blk = r->tile % QD_BLK == 0 && cj % QD_BLK == 0;
        if (!is_int)
            qd_grouped(kc, &sub, xj, mv, cj, recip, zpf, g0, oj, false, false, false);
        else if (r->zp)
            qd_grouped(kc, &sub, xj, mv, cj, recip, zpf, g0, oj, true, true, false);
        else if (blk)
            qd_grouped(kc, &sub, xj, mv, cj, recip, zpf, g0, oj, false, true, true);
        else
            qd_grouped(kc, &sub, xj, mv, cj, recip, zpf, g0, oj, false, true, false);
        if (mv < m) quant_generic_quantize(r, xj + mv, m - mv, cj + mv, oj + mv * csize);
    }
}

/* ---- tiles smaller than a vector (QD_W % tile == 0, c0 % QD_W == 0) ------------------------- */

/* Codes for x[0..nv) (nv % QD_W == 0) whose column groups of `tile` (a compile-time power of two
 * below QD_W) are QD_W / tile to a vector: each vector's scales (and zero points) spread over its
 * lanes, the codes by the IEEE division (the scalar path's codes by construction, no tie to
 * redo). Zero points go through a float table per sub-chunk of QD_SUB elements. */
ALWAYS_INLINE void qd_small_tiles(quant_kcode kc, const quant_krow *r, const float *x, int64_t nv,
                                  int64_t c0, uint8_t *out, const int64_t tile, const bool asym)
{
    const size_t csize = qd_csize(kc);
    const qd_vf qmin = qd_set1(r->qmin), qmax = qd_set1(r->qmax), zero = qd_set1(0.0f);
    float zpf[QD_SUB / 2];
    for (int64_t j0 = 0; j0 < nv; j0 += QD_SUB) {
        int64_t m = nv - j0 < QD_SUB ? nv - j0 : QD_SUB, g0 = (c0 + j0) / tile;
        const float *s = r->scale + g0, *xj = x + j0;
        uint8_t *oj = out + j0 * csize;
        if (asym)
            for (int64_t g = 0; g < m / tile; g++) zpf[g] = (float)r->zp[g0 + g];
#define QD_SMALL(at) /* codes of the vector at element `at` of the sub-chunk */                    \
    qd_divide(kc, xj + (at), qd_spread(s + (at) / tile, tile),                                     \
              asym ? qd_spread(zpf + (at) / tile, tile) : zero, asym, qmin, qmax)
        int64_t j = 0;
        for (; j + QD_BLK <= m; j += QD_BLK) {
            qd_prefetch(r->pf, r->pf_elem, j0 + j);
            qd_store_blk(kc, oj + j * csize, QD_SMALL(j), QD_SMALL(j + QD_W),
                         QD_SMALL(j + 2 * QD_W), QD_SMALL(j + 3 * QD_W));
        }
        for (; j < m; j += QD_W) qd_store_vec(kc, oj + j * csize, QD_SMALL(j));
#undef QD_SMALL
    }
}

ALWAYS_INLINE void qd_small_tiles_kc(quant_kcode kc, const quant_krow *r, const float *x,
                                     int64_t nv, int64_t c0, uint8_t *out)
{
#define QD_SMALL_TILE(t)                                                                           \
    (r->zp ? qd_small_tiles(kc, r, x, nv, c0, out, t, true)                                        \
           : qd_small_tiles(kc, r, x, nv, c0, out, t, false))
    switch (r->tile) {
    case 2:
        QD_SMALL_TILE(2);
        break;
#if QD_W > 4
    case 4:
        QD_SMALL_TILE(4);
        break;
#endif
#if QD_W > 8
    case 8:
        QD_SMALL_TILE(8);
        break;
#endif
    default:
        break;
    }
#undef QD_SMALL_TILE
}

/* A tile qd_small_tiles serves: a power of two below the vector width. */
ALWAYS_INLINE bool qd_small_tile_ok(int64_t tile)
{
    return tile == 2 || (QD_W > 4 && tile == 4) || (QD_W > 8 && tile == 8);
}

/* ---- quantize_fn ----------------------------------------------------------------------------- */

/* One value per group (per-channel scales): the division, lane by lane. */
ALWAYS_INLINE int64_t qd_per_column(quant_kcode kc, const quant_krow *r, const float *x, int64_t n,
                                    int64_t c0, qd_vf qmin, qd_vf qmax, uint8_t *out)
{
    const size_t csize = qd_csize(kc);
    int64_t j = 0;
    for (; j + QD_W <= n; j += QD_W) {
        qd_vf v = qd_div(qd_load(x + j), qd_load(r->scale + c0 + j));
        if (r->zp) v = qd_add(v, qd_zp(r->zp + c0 + j));
        qd_store_vec(kc, out + j * csize, qd_codes(kc, v, qmin, qmax));
    }
    return j;
}

ALWAYS_INLINE int qd_quantize_kc(quant_kcode kc, const quant_krow *r, const float *x, int64_t n,
                                 int64_t c0, void *codes)
{
    uint8_t *out = codes;
    const size_t csize = qd_csize(kc);
    const qd_vf qmin = qd_set1(r->qmin), qmax = qd_set1(r->qmax);
    /* the non-finite check is its own pass over the chunk, in cache, when it is needed at all */
    int bad = !r->checked && seg_absmax_bits(x, n) >= 0x7f800000u;
    if (r->tile == 1) {
        int64_t j = qd_per_column(kc, r, x, n, c0, qmin, qmax, out);
        return bad | quant_generic_quantize(r, x + j, n - j, c0 + j, out + j * csize);
    }
    /* zero points on fp8/nf4/e2m1 (never asked by the drivers) stay scalar */
    if (r->zp && !qk_is_int(kc)) return quant_generic_quantize(r, x, n, c0, codes);
    if (qd_small_tile_ok(r->tile) && c0 % QD_W == 0) { /* several groups to a vector */
        int64_t nv = n & ~(int64_t)(QD_W - 1);
        qd_small_tiles_kc(kc, r, x, nv, c0, out);
        return bad | quant_generic_quantize(r, x + nv, n - nv, c0 + nv, out + nv * csize);
    }
    /* other tiles below the vector width (odd ones, or off the vector grid) stay scalar */
    if (r->tile < QD_W) return quant_generic_quantize(r, x, n, c0, codes);
    if (r->tile < 64 && r->tile % QD_W == 0 && c0 % QD_W == 0) { /* small tiles: many groups */
        qd_grouped_kc(kc, r, x, n, c0, out);
        return bad;
    }
    int64_t g = c0 / r->tile, end = (g + 1) * r->tile - c0, glast = (c0 + n - 1) / r->tile;
    float rb[QD_W]; /* 1 / scale of groups rb0.., QD_W at a time by one vector division */
    int64_t rb0 = g - QD_W;
    for (int64_t j = 0; j < n; g++, end += r->tile) {
        if (end > n) end = n;
        if (g - rb0 >= QD_W && g + QD_W - 1 <= glast) {
            qd_store(rb, qd_div(qd_set1(1.0f), qd_load(r->scale + g)));
            rb0 = g;
        }
        float sc = r->scale[g], rc = g - rb0 < QD_W ? rb[g - rb0] : 1.0f / sc;
        qd_vf z = qd_set1(r->zp ? (float)r->zp[g] : 0.0f);
        const char *pf = r->pf ? r->pf + j * r->pf_elem : NULL;
        if (r->zp)
            j += qd_quantize_seg(kc, x + j, end - j, sc, rc, z, true, qmin, qmax, out + j * csize,
                                 pf, r->pf_elem);
        else
            j += qd_quantize_seg(kc, x + j, end - j, sc, rc, z, false, qmin, qmax, out + j * csize,
                                 pf, r->pf_elem);
        if (j < end) bad |= quant_generic_quantize(r, x + j, end - j, c0 + j, out + j * csize);
        j = end;
    }
    return bad;
}

static int qd_quantize(const quant_krow *r, const float *x, int64_t n, int64_t c0, void *codes)
{
    switch (r->kcode) {
    case QK_I8:
        return qd_quantize_kc(QK_I8, r, x, n, c0, codes);
    case QK_U8:
        return qd_quantize_kc(QK_U8, r, x, n, c0, codes);
    case QK_I16:
        return qd_quantize_kc(QK_I16, r, x, n, c0, codes);
    case QK_E4M3:
        return qd_quantize_kc(QK_E4M3, r, x, n, c0, codes);
    case QK_E5M2:
        return qd_quantize_kc(QK_E5M2, r, x, n, c0, codes);
    case QK_NF4:
        return qd_quantize_kc(QK_NF4, r, x, n, c0, codes);
    case QK_E2M1:
        return qd_quantize_kc(QK_E2M1, r, x, n, c0, codes);
    default:
        return quant_generic_quantize(r, x, n, c0, codes);
    }
}

#ifndef QD_QUANTIZE_ONLY
/* ---- quantize_absmax_fn: one pass for symmetric absmax tiles 16/32/64 ------------------------ */

/* QD_W groups at a time: max |x| reduced in registers, their scales as lin_scales computes them
 * (max / bound, SPEC 4's tiny rule), stored, then the groups quantized from L1 by the IEEE
 * division: the scalar path's codes by construction, no tie to redo. */
/* Codes of the vector at x, all in the group whose scale is lane i of s (|x / s| is within the
 * bound, so the rounded value converts exactly). */
ALWAYS_INLINE qd_vi qd_onepass_codes(const float *x, qd_vf s, int64_t i, qd_vi qmin, qd_vi qmax)
{
    return qd_bounded_codes(qd_div(qd_load(x), qd_lane_of(s, i)), qmin, qmax);
}

ALWAYS_INLINE int qd_onepass_kc(quant_kcode kc, const quant_krow *r, const float *x, int64_t n,
                                int64_t c0, float bound, float *scale, uint8_t *out,
                                const int64_t tile)
{
    const size_t csize = qd_csize(kc);
    const qd_vi qmin = qd_cvt(qd_set1(r->qmin)), qmax = qd_cvt(qd_set1(r->qmax));
    const qd_vf bv = qd_set1(bound), inf = qd_set1(INFINITY);
    float *sg = scale + c0 / tile;
    qd_vm badv = qd_near_none();
    int64_t j = 0;
    for (; j + QD_W * tile <= n; j += QD_W * tile, sg += QD_W) {
        qd_vi m[QD_W];
        for (int i = 0; i < QD_W; i++) {
            const float *xg = x + j + i * tile;
            qd_vi a = qd_abs_bits(qd_load(xg));
            for (int64_t k = QD_W; k < tile; k += QD_W)
                a = qd_max_bits(a, qd_abs_bits(qd_load(xg + k)));
            m[i] = a;
        }
        qd_vf s = qd_tiny_one(qd_div(qd_bits_f(qd_hmax_groups(m)), bv));
        badv = qd_note(badv, s, inf); /* s >= Inf or NaN: not a finite scale */
        qd_store(sg, s);
        for (int64_t k = 0; k < QD_W * tile; k += QD_BLK) {
            qd_prefetch(r->pf, r->pf_elem, j + k);
            const float *xk = x + j + k;
            qd_store_blk(kc, out + (j + k) * csize, qd_onepass_codes(xk, s, k / tile, qmin, qmax),
                         qd_onepass_codes(xk + QD_W, s, (k + QD_W) / tile, qmin, qmax),
                         qd_onepass_codes(xk + 2 * QD_W, s, (k + 2 * QD_W) / tile, qmin, qmax),
                         qd_onepass_codes(xk + 3 * QD_W, s, (k + 3 * QD_W) / tile, qmin, qmax));
        }
    }
    bool bad = qd_any(badv);
    for (; j < n; j += tile, sg++) { /* the last groups, fewer than QD_W */
        float sc = qn_float(seg_absmax_bits(x + j, tile)) / bound;
        sc = sc < QN_TINY_SCALE ? 1.0f : sc;
        bad |= !(sc <= FLT_MAX);
        *sg = sc;
        const qd_vf s = qd_set1(sc);
        for (int64_t k = 0; k < tile; k += QD_W)
            qd_store_vec(kc, out + (j + k) * csize,
                         qd_bounded_codes(qd_div(qd_load(x + j + k), s), qmin, qmax));
    }
    return bad;
}

#define QD_ONEPASS_TILES(kc)                                                                       \
    (r->tile == 16   ? qd_onepass_kc(kc, r, x, n, c0, bound, scale, codes, 16)                     \
     : r->tile == 32 ? qd_onepass_kc(kc, r, x, n, c0, bound, scale, codes, 32)                     \
                     : qd_onepass_kc(kc, r, x, n, c0, bound, scale, codes, 64))

static int qd_quantize_absmax(const quant_krow *r, const float *x, int64_t n, int64_t c0,
                              float bound, float *scale, void *codes)
{
    if (!QUANT_ONEPASS_TILE_OK(r->tile) || c0 % r->tile || n % r->tile) return 1;
    switch (r->kcode) {
    case QK_I8:
        return QD_ONEPASS_TILES(QK_I8);
    case QK_U8:
        return QD_ONEPASS_TILES(QK_U8);
    case QK_I16:
        return QD_ONEPASS_TILES(QK_I16);
    default:
        return 1;
    }
}
#undef QD_ONEPASS_TILES

/* ---- mse_int_fn: the fused MSE search, QD_W candidates per vector ---------------------------- */

static void qd_mse_int(const float *x, const float *w, int64_t n, int64_t c0, int64_t tile,
                       const float *scale, int nk, int64_t es, float qmin, float qmax, double *err)
{
    const qd_vf qn = qd_set1(qmin), qx = qd_set1(qmax);
    for (int64_t j = 0; j < n;) {
        int64_t g = (c0 + j) / tile, end = (g + 1) * tile - c0;
        if (end > n) end = n;
        for (int k0 = 0; k0 < nk; k0 += QD_W) {
            int m = nk - k0 < QD_W ? nk - k0 : QD_W;
            float sv[QD_W];
            double av[QD_W];
            for (int b = 0; b < QD_W; b++) { /* spare lanes: scale 1, sums dropped */
                sv[b] = b < m ? scale[(k0 + b) * es + g] : 1.0f;
                av[b] = b < m ? err[(k0 + b) * es + g] : 0.0;
            }
            if (w)
                qd_mse_lanes(x, w, false, j, end, sv, av, qn, qx);
            else /* all weights 1: 1 * (e * e) is e * e */
                qd_mse_lanes(x, w, true, j, end, sv, av, qn, qx);
            for (int b = 0; b < m; b++) err[(k0 + b) * es + g] = av[b];
        }
        j = end;
    }
}

/* ---- errstats_fn and errstats_codes_fn: the quality measurement's error sums ---------------- */

/* quant_generic_errstats's QUANT_ERR_LANES lanes (element j of a lane group in lane j) as
 * QD_ERR_DV vectors of QD_W / 2 doubles: float vector f of a group gives its low half to double
 * vector 2f and its high half to 2f + 1, so double vector v holds lanes v * QD_W / 2 on. */
#define QD_ERR_FV (QUANT_ERR_LANES / QD_W) /* float vectors per lane group */
#define QD_ERR_DV (2 * QD_ERR_FV)          /* double vectors per sum */
_Static_assert(QUANT_ERR_LANES % QD_W == 0, "a lane group is whole float vectors");

typedef struct qd_errsums {
    qd_vd sx[QD_ERR_DV], se[QD_ERR_DV], mx[QD_ERR_DV];
} qd_errsums;

ALWAYS_INLINE qd_errsums qd_err_zero(void)
{
    qd_errsums a;
    for (int v = 0; v < QD_ERR_DV; v++) a.sx[v] = a.se[v] = a.mx[v] = qd_d_zero();
    return a;
}

/* QD_W / 2 lanes in the generic order: e = x - d, sx += x * x, se += e * e, mx = |e| > mx ? |e| :
 * mx (a NaN error leaves mx as it was). */
ALWAYS_INLINE void qd_err_half(qd_errsums *a, int v, qd_vd xh, qd_vd dh)
{
    qd_vd e = qd_d_sub(xh, dh);
    a->sx[v] = qd_d_add(a->sx[v], qd_d_mul(xh, xh));
    a->se[v] = qd_d_add(a->se[v], qd_d_mul(e, e));
    a->mx[v] = qd_d_max(qd_d_abs(e), a->mx[v]);
}

/* Float vector f of a lane group: x and its dequantized values d. */
ALWAYS_INLINE void qd_err_vec(qd_errsums *a, int f, qd_vf x, qd_vf d)
{
    qd_err_half(a, 2 * f, qd_d_lo(x), qd_d_lo(d));
    qd_err_half(a, 2 * f + 1, qd_d_hi(x), qd_d_hi(d));
}

/* The lanes to memory, then quant_errstats_finish: the tail x/d[0..n) (n < QUANT_ERR_LANES) from
 * lane 0 and the lanes added into acc in order. */
ALWAYS_INLINE void qd_err_finish(const qd_errsums *a, const float *x, const float *d, int64_t n,
                                 double acc[3])
{
    double sx[QUANT_ERR_LANES], se[QUANT_ERR_LANES], mx[QUANT_ERR_LANES];
    for (int v = 0; v < QD_ERR_DV; v++) {
        qd_d_store(sx + v * (QD_W / 2), a->sx[v]);
        qd_d_store(se + v * (QD_W / 2), a->se[v]);
        qd_d_store(mx + v * (QD_W / 2), a->mx[v]);
    }
    quant_errstats_finish(x, d, n, sx, se, mx, acc);
}

/* quant_generic_errstats, a lane group at a time. */
static void qd_errstats(const float *x, const float *d, int64_t n, double acc[3])
{
    qd_errsums a = qd_err_zero();
    int64_t j = 0;
    for (; j + QUANT_ERR_LANES <= n; j += QUANT_ERR_LANES)
        for (int f = 0; f < QD_ERR_FV; f++)
            qd_err_vec(&a, f, qd_load(x + j + f * QD_W), qd_load(d + j + f * QD_W));
    qd_err_finish(&a, x + j, d + j, n - j, acc);
}

/* The column group the next vector of errstats_codes starts in: its index, where it ends (chunk
 * offset) and its scale and zero point in every lane. */
typedef struct qd_errq_group {
    int64_t g, end;
    qd_vf s, z;
} qd_errq_group;

ALWAYS_INLINE qd_errq_group qd_errq_first(const quant_krow *r, int64_t c0)
{
    qd_errq_group q = {0, 0, qd_set1(0.0f), qd_set1(0.0f)};
    if (r->tile == 1) return q;
    q.g = c0 / r->tile;
    q.end = (q.g + 1) * r->tile - c0;
    q.s = qd_set1(r->scale[q.g]);
    q.z = qd_set1(r->zp ? (float)r->zp[q.g] : 0.0f);
    return q;
}

/* Scale and zero point of the QD_W lanes at j: tile 1 loads them; tiles of QD_W and more have at
 * most one group boundary in a vector (the lanes from end - j on take group g + 1, whose first
 * element is then below n). */
ALWAYS_INLINE void qd_errq_step(const quant_krow *r, int64_t j, int64_t c0, qd_errq_group *q,
                                qd_vf *s, qd_vf *z)
{
    if (r->tile == 1) {
        *s = qd_load(r->scale + c0 + j);
        *z = r->zp ? qd_zp(r->zp + c0 + j) : qd_set1(0.0f);
        return;
    }
    *s = q->s;
    *z = q->z;
    if (j + QD_W <= q->end) return;
    qd_vm first = qd_lanes_below(q->end - j);
    q->g++;
    q->end += r->tile;
    q->s = qd_set1(r->scale[q->g]);
    q->z = qd_set1(r->zp ? (float)r->zp[q->g] : 0.0f);
    *s = qd_pick(first, *s, q->s);
    *z = qd_pick(first, *z, q->z);
}

/* errstats of x against the integer codes dequantized as quant_generic_dequantize does them,
 * (level - zp) * scale or level * scale in float32, without the dequantized copy. Tiles of 1 and
 * of QD_W and more (others: declined). The last partial lane group is dequantized and widened
 * into the tail. `bf16` is a compile-time constant at each call. */
ALWAYS_INLINE int qd_errstats_codes_kc(quant_kcode kc, const bool bf16, const quant_krow *r,
                                       const void *x, const uint8_t *codes, int64_t n, int64_t c0,
                                       double acc[3])
{
    if (r->tile != 1 && r->tile < QD_W) return 1;
    if (n <= 0) return 0; /* nothing to add, and no group's scale to read */
    const size_t csize = qd_csize(kc);
    qd_errq_group q = qd_errq_first(r, c0);
    qd_errsums a = qd_err_zero();
    int64_t j = 0;
    for (; j + QUANT_ERR_LANES <= n; j += QUANT_ERR_LANES)
        for (int f = 0; f < QD_ERR_FV; f++) {
            int64_t jf = j + f * QD_W;
            qd_vf s, z, l = qd_int_levels(kc, codes + jf * csize);
            qd_errq_step(r, jf, c0, &q, &s, &z);
            if (r->zp) l = qd_sub(l, z);
            qd_err_vec(&a, f, qd_src(x, bf16, jf), qd_mul(l, s));
        }
    float xt[QUANT_ERR_LANES], dt[QUANT_ERR_LANES];
    quant_generic_dequantize(r, codes + j * csize, n - j, c0 + j, dt);
    for (int64_t l = 0; l < n - j; l++)
        xt[l] = bf16 ? qn_bf16_to_f32(((const uint16_t *)x)[j + l]) : ((const float *)x)[j + l];
    qd_err_finish(&a, xt, dt, n - j, acc);
    return 0;
}

#define QD_ERRQ_KIND(kc)                                                                           \
    case kc * 2:                                                                                   \
        return qd_errstats_codes_kc(kc, false, r, x, codes, n, c0, acc);                           \
    case kc * 2 + 1:                                                                               \
        return qd_errstats_codes_kc(kc, true, r, x, codes, n, c0, acc);

/* errstats_codes_fn: integer codes (int8, uint8, int16), float32 or bf16 sources. */
static int qd_errstats_codes(const quant_krow *r, const void *x, bool bf16, const void *codes,
                             int64_t n, int64_t c0, double acc[3])
{
    switch (r->kcode * 2 + (int)bf16) {
        QD_ERRQ_KIND(QK_I8)
        QD_ERRQ_KIND(QK_U8)
        QD_ERRQ_KIND(QK_I16)
    default:
        return 1;
    }
}
#undef QD_ERRQ_KIND

#endif /* QD_QUANTIZE_ONLY */

#endif /* QUANT_DRIVER_BODY_H */
