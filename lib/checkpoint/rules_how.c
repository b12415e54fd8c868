/* rules_how.c -- from a tensor to its rule's terms: the module path of a tensor name, and the
 * libquant quant_how a validated rule gives for one tensor shape (axes resolved against its rank).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Axis semantics (SPEC section 1, Qwix): contraction axes are reduced; a numeric tile_size tiles
 * the last contraction axis as listed in contraction_axes; an object tile_size tiles the axes
 * it names; every other axis is channelwise, and a tiled axis never is. A microscaling qtype
 * (mxfp8, mxfp8_16, mxfp4, nvfp4) without tile_size gets its fixed tile on that last
 * contraction axis (SPEC 2b).
 */
#include <string.h>

#include "quant_rules.h"

bool quant_module_path(const char *name, char *out, size_t cap)
{
    if (!out || cap == 0) return false;
    out[0] = '\0';
    if (!name) return false;
    size_t len = 0;
    for (size_t i = 0; name[i]; i++)
        if (name[i] == '.' || name[i] == '/') len = i;
    if (len >= cap) return false;
    memcpy(out, name, len);
    out[len] = '\0';
    return true;
}

static quant_ck_status norm_axis(int axis, int rank, const char *what, int *out,
                                 quant_ck_error *err)
{
    int a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
        return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "%s axis %d is out of range for rank %d",
                             what, axis, rank);
    *out = a;
    return QUANT_CK_OK;
}

/* Marks the contraction axes; *last gets the last one as listed. */
static quant_ck_status contraction(const quant_rule *r, int rank, bool *reduced, int *last,
                                   quant_ck_error *err)
{
    for (int i = 0; i < r->n_contraction_axes; i++) {
        int a = 0;
        quant_ck_status st = norm_axis(r->contraction_axes[i], rank, "contraction", &a, err);
        if (st != QUANT_CK_OK) return st;
        if (reduced[a])
            return quant_ck_fail(err, QUANT_CK_ERR_QUANT,
                                 "contraction axis %d names axis %d again (rank %d)",
                                 r->contraction_axes[i], a, rank);
        reduced[a] = true;
        *last = a;
    }
    return QUANT_CK_OK;
}

static quant_ck_status tiles(const quant_rule *r, int rank, int last, bool *tiled, quant_how *how,
                             quant_ck_error *err)
{
    for (int i = 0; i < r->n_tiles; i++) {
        quant_tile t = r->tiles[i];
        int a = last;
        if (!r->tile_on_contraction) {
            quant_ck_status st = norm_axis(t.axis, rank, "tile_size", &a, err);
            if (st != QUANT_CK_OK) return st;
        }
        if (tiled[a])
            return quant_ck_fail(err, QUANT_CK_ERR_QUANT,
                                 "tile_size axis %d names axis %d again (rank %d)", t.axis, a,
                                 rank);
        tiled[a] = true;
        t.axis = a;
        how->tiles[how->n_tiles++] = t;
    }
    return QUANT_CK_OK;
}

quant_ck_status quant_rule_how(const quant_rule *r, const char *tensor_name, int rank,
                               const int64_t *shape, quant_how *how, quant_ck_error *err)
{
    if (!r || !how || (rank > 0 && !shape))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_rule_how: NULL argument");
    if (!r->has_weight_qtype)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "the rule has no weight_qtype");
    if (rank < 0 || rank > QUANT_MAX_RANK)
        return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "rank %d is outside 0..%d", rank,
                             QUANT_MAX_RANK);
    quant_how_init(how, r->weight_qtype);
    bool reduced[QUANT_MAX_RANK] = {false}, tiled[QUANT_MAX_RANK] = {false};
    int last = 0;
    quant_ck_status st = contraction(r, rank, reduced, &last, err);
    if (st == QUANT_CK_OK) st = tiles(r, rank, last, tiled, how, err);
    if (st != QUANT_CK_OK) return st;
    int64_t fixed = quant_qtype_traits_get(r->weight_qtype)->fixed_tile;
    if (fixed && how->n_tiles == 0) { /* microscaling: the fixed tile is implied (SPEC 2b) */
        how->tiles[how->n_tiles++] = (quant_tile){.axis = last, .size = fixed};
        tiled[last] = true;
    }
    for (int a = 0; a < rank; a++)
        if (!reduced[a] && !tiled[a]) how->channel_axes[how->n_channel_axes++] = a;
    how->calibration = r->weight_calibration;
    how->scale_dtype = r->scale_dtype;
    how->pack = r->pack;
    how->stochastic = r->stochastic_rounding;
    how->sr_key = r->stochastic_rounding ? quant_sr_key(r->sr_seed, tensor_name) : 0;
    int64_t scale_shape[QUANT_MAX_RANK];
    quant_error qe;
    if (quant_scale_shape(how, rank, shape, scale_shape, &qe) != QUANT_OK)
        return quant_ck_fail(err, QUANT_CK_ERR_QUANT, "%s", qe.message);
    return QUANT_CK_OK;
}
