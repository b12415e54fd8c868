/* plan.c -- validates a `how` against a shape: calibration method parsing, axes, tiles, scale
 * shape, and the row view (quant_plan) every driver works from.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void quant_how_init(quant_how *how, quant_qtype qtype)
{
    memset(how, 0, sizeof *how);
    how->qtype = qtype;
    how->calibration = NULL;
    how->scale_dtype = QUANT_DTYPE_F32;
    how->pack = true;
}

int64_t quant_numel(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

quant_status quant_tensor_init(quant_tensor *t, quant_dtype dtype, int rank, const int64_t *shape,
                               void *data, quant_error *err)
{
    quant_error_clear(err);
    if (!t || (rank > 0 && !shape))
        return quant_fail(err, QUANT_ERR_ARG, "tensor or shape is NULL");
    if (rank < 0 || rank > QUANT_MAX_RANK)
        return quant_fail(err, QUANT_ERR_ARG, "rank %d is outside 0..%d", rank, QUANT_MAX_RANK);
    if (quant_numel(rank, shape) < 0)
        return quant_fail(err, QUANT_ERR_ARG, "shape has a negative dim or overflows");
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->rank = rank;
    t->data = data;
    int64_t stride = 1;
    for (int i = rank - 1; i >= 0; i--) {
        t->shape[i] = shape[i];
        t->strides[i] = stride;
        stride *= shape[i] ? shape[i] : 1;
    }
    return QUANT_OK;
}

/* ---- calibration method ---------------------------------------------------------------------- */

#define METHOD_TEXT_MAX 128

static quant_status parse_args(char *rest, double *args, int *nargs, const char *text,
                               quant_error *err)
{
    *nargs = 0;
    while (rest) {
        char *comma = strchr(rest, ',');
        if (comma) *comma = '\0';
        if (*nargs == 2)
            return quant_fail(err, QUANT_ERR_METHOD, "calibration \"%.64s\": too many arguments",
                              text);
        char *end = NULL;
        double v = strtod(rest, &end);
        while (end && isspace((unsigned char)*end)) end++;
        if (end == rest || !end || *end != '\0' || !isfinite(v))
            return quant_fail(err, QUANT_ERR_METHOD,
                              "calibration \"%.64s\": argument \"%.32s\" is not a finite number",
                              text, rest);
        args[(*nargs)++] = v;
        rest = comma ? comma + 1 : NULL;
    }
    return QUANT_OK;
}

static quant_status check_factor(quant_calib_method *m, const double *args, int nargs,
                                 const char *text, quant_error *err)
{
    if (nargs > 1)
        return quant_fail(err, QUANT_ERR_METHOD, "calibration \"%.64s\": takes one factor at most",
                          text);
    if (nargs == 1) {
        if (!(args[0] > 0))
            return quant_fail(err, QUANT_ERR_METHOD,
                              "calibration \"%.64s\": factor must be positive", text);
        m->has_factor = true;
        m->factor = args[0];
    }
    return QUANT_OK;
}

/* mse[,n[,lo]] / minmax_mse[,n[,lo]] (SPEC 9): n an integer in 1..QUANT_MSE_MAX_STEPS (default
 * 20), lo in [0, 1] (default 0.5). */
static quant_status check_mse(quant_calib_method *m, const double *args, int nargs,
                              const char *text, quant_error *err)
{
    m->mse_steps = 20;
    m->mse_lo = 0.5;
    if (nargs >= 1) {
        if (!(args[0] >= 1 && args[0] <= QUANT_MSE_MAX_STEPS) || args[0] != floor(args[0]))
            return quant_fail(err, QUANT_ERR_METHOD,
                              "calibration \"%.64s\": the step count n must be an integer in "
                              "1..%d",
                              text, QUANT_MSE_MAX_STEPS);
        m->mse_steps = (int)args[0];
    }
    if (nargs == 2) {
        if (!(args[1] >= 0 && args[1] <= 1))
            return quant_fail(err, QUANT_ERR_METHOD,
                              "calibration \"%.64s\": the smallest factor lo must be in [0, 1]",
                              text);
        m->mse_lo = args[1];
    }
    return QUANT_OK;
}

quant_status quant_calib_parse(const char *text, quant_calib_method *out, quant_error *err)
{
    if (!text) text = "absmax";
    if (!out) return quant_fail(err, QUANT_ERR_ARG, "output is NULL");
    size_t len = strlen(text);
    if (len >= METHOD_TEXT_MAX)
        return quant_fail(err, QUANT_ERR_METHOD, "calibration method longer than %d characters",
                          METHOD_TEXT_MAX - 1);
    char buf[METHOD_TEXT_MAX];
    for (size_t i = 0; i <= len; i++) buf[i] = (char)tolower((unsigned char)text[i]);

    char *comma = strchr(buf, ',');
    if (comma) *comma = '\0';
    char *name = buf;
    while (isspace((unsigned char)*name)) name++;
    for (char *e = name + strlen(name); e > name && isspace((unsigned char)e[-1]); e--)
        e[-1] = '\0';

    double args[2];
    int nargs = 0;
    QUANT_RETURN_IF_ERR(parse_args(comma ? comma + 1 : NULL, args, &nargs, text, err));

    quant_calib_method m;
    memset(&m, 0, sizeof m);
    m.factor = 1.0;
    if (strcmp(name, "absmax") == 0) {
        m.kind = QUANT_CALIB_ABSMAX;
        QUANT_RETURN_IF_ERR(check_factor(&m, args, nargs, text, err));
    } else if (strcmp(name, "minmax") == 0) {
        m.kind = QUANT_CALIB_MINMAX;
        m.asymmetric = true;
        QUANT_RETURN_IF_ERR(check_factor(&m, args, nargs, text, err));
    } else if (strcmp(name, "rms") == 0) {
        m.kind = QUANT_CALIB_RMS;
        if (nargs != 1)
            return quant_fail(err, QUANT_ERR_METHOD,
                              "calibration \"%.64s\": rms needs a factor, as in \"rms,3.0\"", text);
        QUANT_RETURN_IF_ERR(check_factor(&m, args, nargs, text, err));
    } else if (strcmp(name, "fixed") == 0) {
        m.kind = QUANT_CALIB_FIXED;
        if (nargs == 0)
            return quant_fail(err, QUANT_ERR_METHOD,
                              "calibration \"%.64s\": fixed needs a range, as in \"fixed,-2,2\"",
                              text);
        double a = nargs == 1 ? -args[0] : args[0];
        double b = nargs == 1 ? args[0] : args[1];
        if (a > 0 || b < 0 || a >= b)
            return quant_fail(err, QUANT_ERR_METHOD,
                              "calibration \"%.64s\": the range [%g, %g] must contain 0 and be "
                              "non-empty",
                              text, a, b);
        m.fixed_min = a;
        m.fixed_max = b;
        m.asymmetric = (a + b != 0);
    } else if (strcmp(name, "mse") == 0 || strcmp(name, "minmax_mse") == 0) {
        m.kind = name[0] == 'm' && name[1] == 's' ? QUANT_CALIB_MSE : QUANT_CALIB_MINMAX_MSE;
        m.asymmetric = m.kind == QUANT_CALIB_MINMAX_MSE;
        QUANT_RETURN_IF_ERR(check_mse(&m, args, nargs, text, err));
    } else {
        return quant_fail(err, QUANT_ERR_METHOD,
                          "unknown calibration method \"%.64s\" (expected absmax[,f], minmax[,f], "
                          "rms,f, fixed,a[,b], mse[,n[,lo]] or minmax_mse[,n[,lo]])",
                          text);
    }
    *out = m;
    return QUANT_OK;
}

/* ---- axes, tiles, scale shape ---------------------------------------------------------------- */

static quant_status normalize_axis(int axis, int rank, const char *what, int *out, quant_error *err)
{
    int a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
        return quant_fail(err, QUANT_ERR_AXIS, "%s axis %d is out of range for rank %d", what, axis,
                          rank);
    *out = a;
    return QUANT_OK;
}

/* Per axis: 0 = reduced, otherwise the scale dim. */
static quant_status axis_scale_dims(const quant_how *how, int rank, const int64_t *shape,
                                    int64_t *sdim, quant_error *err)
{
    bool channel[QUANT_MAX_RANK] = {false};
    bool tiled[QUANT_MAX_RANK] = {false};
    if (how->n_channel_axes < 0 || how->n_channel_axes > QUANT_MAX_RANK || how->n_tiles < 0 ||
        how->n_tiles > QUANT_MAX_RANK)
        return quant_fail(err, QUANT_ERR_AXIS, "axis counts must be within 0..%d", QUANT_MAX_RANK);
    for (int i = 0; i < rank; i++) sdim[i] = 1;
    for (int i = 0; i < how->n_channel_axes; i++) {
        int a = 0;
        QUANT_RETURN_IF_ERR(normalize_axis(how->channel_axes[i], rank, "channelwise", &a, err));
        if (channel[a])
            return quant_fail(err, QUANT_ERR_AXIS, "channelwise axis %d is given twice",
                              how->channel_axes[i]);
        channel[a] = true;
        sdim[a] = shape[a];
    }
    for (int i = 0; i < how->n_tiles; i++) {
        const quant_tile *t = &how->tiles[i];
        int a = 0;
        QUANT_RETURN_IF_ERR(normalize_axis(t->axis, rank, "tiled", &a, err));
        if (channel[a])
            return quant_fail(err, QUANT_ERR_AXIS, "axis %d cannot be both channelwise and tiled",
                              t->axis);
        if (tiled[a]) return quant_fail(err, QUANT_ERR_AXIS, "axis %d is tiled twice", t->axis);
        tiled[a] = true;
        int64_t size = t->size;
        if (size == 0) {
            if (!(t->fraction > 0 && t->fraction <= 1))
                return quant_fail(err, QUANT_ERR_TILE,
                                  "tile fraction %g for axis %d must be in (0, 1]", t->fraction,
                                  t->axis);
            size = (int64_t)rint((double)shape[a] * t->fraction); /* Python round: half to even */
        }
        if (size <= 0)
            return quant_fail(err, QUANT_ERR_TILE, "tile size %lld for axis %d must be positive",
                              (long long)size, t->axis);
        if (size > shape[a])
            return quant_fail(err, QUANT_ERR_TILE,
                              "tile %lld is larger than axis %d (size %lld): a tile must fit in "
                              "its axis; use at most %lld (a divisor of it)",
                              (long long)size, t->axis, (long long)shape[a], (long long)shape[a]);
        if (shape[a] % size != 0)
            return quant_fail(err, QUANT_ERR_TILE,
                              "axis %d of size %lld cannot be tiled by %lld (not a divisor)",
                              t->axis, (long long)shape[a], (long long)size);
        sdim[a] = shape[a] / size;
    }
    return QUANT_OK;
}

quant_status quant_scale_shape(const quant_how *how, int rank, const int64_t *shape,
                               int64_t *scale_shape, quant_error *err)
{
    quant_plan plan;
    quant_error_clear(err);
    QUANT_RETURN_IF_ERR(quant_plan_make(how, rank, shape, &plan, err));
    if (!scale_shape && rank > 0) return quant_fail(err, QUANT_ERR_ARG, "scale_shape is NULL");
    for (int i = 0; i < rank; i++) scale_shape[i] = plan.sshape[i];
    return QUANT_OK;
}

int64_t quant_qvalue_bytes(const quant_how *how, int rank, const int64_t *shape)
{
    quant_plan plan;
    if (quant_plan_make(how, rank, shape, &plan, NULL) != QUANT_OK) return -1;
    if (plan.qrow_bytes != 0 && plan.nrows > INT64_MAX / plan.qrow_bytes) return -1;
    return plan.nrows * plan.qrow_bytes;
}

/* The smallest global scale nvfp4 takes: every block scale s_b is an e4m3fn value of at most
 * 448, so e_b = f32(s_b / g) is finite for every block exactly when 448 / g is, i.e. g >= 2^-119
 * (448 * 2^119 = 1.75 * 2^127). A g derived from a finite tensor (2688 / A) is at least
 * 2688 / FLT_MAX, about 2^-115.6, so only a user-given g can be below it. */
#define NVFP4_MIN_GLOBAL_SCALE 0x1p-119f

/* A user-given global scale (how->global_scale != 0): nvfp4 only, finite and at least
 * NVFP4_MIN_GLOBAL_SCALE, so that the block scales and the codes are finite for any data. */
static quant_status check_global_scale(float g, const quant_plan *plan, quant_error *err)
{
    if (plan->traits->scale_kind != QUANT_SCALE_NVFP4)
        return quant_fail(err, QUANT_ERR_ARG, "global scale %g: only nvfp4 takes one", (double)g);
    if (!(g >= NVFP4_MIN_GLOBAL_SCALE) || g > FLT_MAX)
        return quant_fail(err, QUANT_ERR_ARG,
                          "nvfp4 global scale %g is outside [%g (2^-119), %g (FLT_MAX)]: below "
                          "2^-119 the largest block scale 448 / g is not a finite float32",
                          (double)g, (double)NVFP4_MIN_GLOBAL_SCALE, (double)FLT_MAX);
    return QUANT_OK;
}

/* Microscaling qtypes (SPEC 2b): symmetric absmax[,f] or rms,f calibration, float32 scales
 * (the stored scale is the power of two or e_b, exact in float32). */
static quant_status check_microscaling(const quant_how *how, const quant_plan *plan,
                                       quant_error *err)
{
    const char *name = plan->traits->name;
    if (plan->method.kind != QUANT_CALIB_ABSMAX && plan->method.kind != QUANT_CALIB_RMS &&
        plan->method.kind != QUANT_CALIB_MSE)
        return quant_fail(err, QUANT_ERR_METHOD,
                          "calibration \"%.64s\" is not allowed for %s (symmetric absmax[,f], "
                          "rms,f or mse[,n[,lo]] only)",
                          how->calibration ? how->calibration : "absmax", name);
    if (how->scale_dtype != QUANT_DTYPE_F32)
        return quant_fail(
            err, QUANT_ERR_DTYPE, "%s stores float32 scales; scale dtype %s is not allowed", name,
            quant_dtype_name(how->scale_dtype) ? quant_dtype_name(how->scale_dtype) : "(invalid)");
    if (how->global_scale != 0.0f) return check_global_scale(how->global_scale, plan, err);
    return QUANT_OK;
}

static quant_kcode kcode_of(quant_qtype q)
{
    switch (q) {
    case QUANT_QTYPE_INT16:
        return QK_I16;
    case QUANT_QTYPE_UINT4:
    case QUANT_QTYPE_UINT8:
        return QK_U8;
    case QUANT_QTYPE_NF4:
        return QK_NF4;
    case QUANT_QTYPE_FP8_E4M3FN:
    case QUANT_QTYPE_MXFP8:
    case QUANT_QTYPE_MXFP8_16:
        return QK_E4M3;
    case QUANT_QTYPE_MXFP4:
    case QUANT_QTYPE_NVFP4:
        return QK_E2M1;
    case QUANT_QTYPE_FP8_E5M2:
        return QK_E5M2;
    default:
        return QK_I8;
    }
}

quant_status quant_plan_check_how(const quant_how *how, quant_plan *plan, quant_error *err)
{
    if (!how) return quant_fail(err, QUANT_ERR_ARG, "how is NULL");
    plan->traits = quant_qtype_traits_get(how->qtype);
    if (!plan->traits)
        return quant_fail(err, QUANT_ERR_QTYPE, "qtype %d is out of range", how->qtype);
    if (plan->traits->kind == QUANT_CODE_GGML)
        return quant_fail(err, QUANT_ERR_UNSUPPORTED,
                          "%s is one of ggml's block types: only the gguf layout writes it",
                          plan->traits->name);
    QUANT_RETURN_IF_ERR(quant_calib_parse(how->calibration, &plan->method, err));
    if (plan->traits->fixed_tile) QUANT_RETURN_IF_ERR(check_microscaling(how, plan, err));
    plan->global_scale = how->global_scale;
    plan->scale_dtype = how->scale_dtype;
    plan->mse_out = how->mse_out;
    if (plan->method.asymmetric && !plan->traits->asymmetric_allowed)
        return quant_fail(err, QUANT_ERR_ASYMMETRIC,
                          "calibration \"%.64s\" is asymmetric, which %s does not allow "
                          "(use absmax, rms or a symmetric fixed range)",
                          how->calibration, plan->traits->name);
    if (how->stochastic && quant_plan_is_mse(plan))
        return quant_fail(err, QUANT_ERR_UNSUPPORTED,
                          "stochastic rounding does not combine with calibration \"%.64s\" (the "
                          "search compares round-to-nearest candidates)",
                          how->calibration);
    if (how->stochastic && plan->traits->kind != QUANT_CODE_INT)
        return quant_fail(err, QUANT_ERR_UNSUPPORTED,
                          "stochastic rounding applies to integer qtypes only, not %s",
                          plan->traits->name);
    if (how->scale_dtype != QUANT_DTYPE_F32 && how->scale_dtype != QUANT_DTYPE_BF16 &&
        how->scale_dtype != QUANT_DTYPE_F16)
        return quant_fail(err, QUANT_ERR_DTYPE, "scale dtype must be F32, BF16 or F16");
    return QUANT_OK;
}

quant_status quant_how_check(const quant_how *how, quant_error *err)
{
    quant_plan plan;
    quant_error_clear(err);
    return quant_plan_check_how(how, &plan, err);
}

/* A microscaling qtype tiles exactly one axis by its fixed tile (SPEC 2b). */
static quant_status check_fixed_tile(const quant_how *how, const quant_plan *plan, int rank,
                                     quant_error *err)
{
    const quant_qtype_traits *t = plan->traits;
    if (rank < 1 || how->n_tiles != 1 || how->tiles[0].size != t->fixed_tile)
        return quant_fail(err, QUANT_ERR_TILE,
                          "%s needs exactly one tile, of its fixed size %lld, on the last "
                          "contraction axis (no other size, fraction or 2-D tile)",
                          t->name, (long long)t->fixed_tile);
    return QUANT_OK;
}

/* MSE calibrations: the importance weights of the contraction axis (SPEC 9). */
static quant_status plan_importance(const quant_how *how, quant_plan *plan, quant_error *err)
{
    bool mse = plan->method.kind == QUANT_CALIB_MSE || plan->method.kind == QUANT_CALIB_MINMAX_MSE;
    if (!mse || !how->importance) return QUANT_OK;
    int a = 0;
    QUANT_RETURN_IF_ERR(normalize_axis(how->importance_axis, plan->rank, "importance", &a, err));
    if (how->importance_len != plan->shape[a])
        return quant_fail(err, QUANT_ERR_ARG, "importance has %lld values but axis %d has %lld",
                          (long long)how->importance_len, how->importance_axis,
                          (long long)plan->shape[a]);
    for (int64_t i = 0; i < how->importance_len; i++) {
        if (!(how->importance[i] >= 0.0f) || how->importance[i] > 3.4028234663852886e38f)
            return quant_fail(err, QUANT_ERR_ARG,
                              "importance value %lld is %g (must be finite and >= 0)", (long long)i,
                              (double)how->importance[i]);
    }
    plan->importance = how->importance;
    /* rows are the axes before the last: a row's index along axis a is (row / inner) % dim */
    plan->imp_inner =
        a == plan->rank - 1 ? 0 : quant_numel(plan->rank - 2 - a, plan->shape + a + 1);
    plan->imp_axis = a;
    return QUANT_OK;
}

quant_status quant_plan_make(const quant_how *how, int rank, const int64_t *shape, quant_plan *plan,
                             quant_error *err)
{
    memset(plan, 0, sizeof *plan);
    QUANT_RETURN_IF_ERR(quant_plan_check_how(how, plan, err));
    if (rank < 0 || rank > QUANT_MAX_RANK || (rank > 0 && !shape))
        return quant_fail(err, QUANT_ERR_ARG, "rank %d is outside 0..%d", rank, QUANT_MAX_RANK);
    int64_t numel = quant_numel(rank, shape);
    if (numel < 0) return quant_fail(err, QUANT_ERR_ARG, "shape has a negative dim or overflows");

    if (plan->traits->fixed_tile) QUANT_RETURN_IF_ERR(check_fixed_tile(how, plan, rank, err));
    int64_t sdim[QUANT_MAX_RANK];
    QUANT_RETURN_IF_ERR(axis_scale_dims(how, rank, shape, sdim, err));

    plan->rank = rank ? rank : 1;
    for (int i = 0; i < plan->rank; i++) {
        plan->shape[i] = rank ? shape[i] : 1;
        plan->sshape[i] = rank ? sdim[i] : 1;
        if (plan->method.kind == QUANT_CALIB_FIXED) plan->sshape[i] = 1;
        int64_t t = plan->sshape[i] ? plan->shape[i] / plan->sshape[i] : 1;
        plan->tile[i] = t > 0 ? t : 1;
    }
    int r = plan->rank;
    plan->numel = numel;
    plan->scale_numel = quant_numel(r, plan->sshape);
    plan->ncols = plan->shape[r - 1];
    plan->nrows = quant_numel(r - 1, plan->shape);
    plan->col_tile = plan->tile[r - 1];
    plan->ncolgroups = plan->sshape[r - 1];
    plan->nsrows = quant_numel(r - 1, plan->sshape);
    plan->members = quant_numel(r - 1, plan->tile);
    plan->group_size = plan->members * plan->col_tile;
    plan->kcode = kcode_of(how->qtype);
    plan->code_size = plan->kcode == QK_I16 ? 2 : 1;
    plan->packed = how->pack && plan->traits->packable;
    plan->qrow_bytes =
        plan->packed ? (plan->ncols + 1) / 2 : plan->ncols * (int64_t)plan->code_size;
    return plan_importance(how, plan, err);
}

int64_t quant_plan_srow(const quant_plan *plan, int64_t row)
{
    int64_t srow = 0, sstride = 1;
    for (int k = plan->rank - 2; k >= 0; k--) {
        int64_t i = row % plan->shape[k];
        row /= plan->shape[k];
        srow += (i / plan->tile[k]) * sstride;
        sstride *= plan->sshape[k];
    }
    return srow;
}

int64_t quant_plan_member_row(const quant_plan *plan, int64_t srow, int64_t m)
{
    int64_t row = 0, stride = 1;
    for (int k = plan->rank - 2; k >= 0; k--) {
        int64_t j = srow % plan->sshape[k];
        int64_t mk = m % plan->tile[k];
        srow /= plan->sshape[k];
        m /= plan->tile[k];
        row += (j * plan->tile[k] + mk) * stride;
        stride *= plan->shape[k];
    }
    return row;
}

quant_status quant_check_zero_point(const quant_plan *plan, const int32_t *zero_point,
                                    quant_error *err)
{
    if (zero_point && !plan->traits->asymmetric_allowed)
        return quant_fail(err, QUANT_ERR_ASYMMETRIC, "%s does not take a zero point",
                          plan->traits->name);
    if (zero_point && !plan->method.asymmetric)
        return quant_fail(err, QUANT_ERR_ARG,
                          "a zero point was given but the calibration \"%.64s\" is symmetric",
                          plan->method.kind == QUANT_CALIB_FIXED ? "fixed" : "absmax/rms");
    if (!zero_point && plan->method.asymmetric)
        return quant_fail(err, QUANT_ERR_ARG,
                          "the calibration is asymmetric but no zero point was given");
    return QUANT_OK;
}

quant_status quant_check_zero_point_values(const quant_plan *plan, const int32_t *zero_point,
                                           quant_error *err)
{
    if (!zero_point) return QUANT_OK;
    const quant_qtype_traits *t = plan->traits;
    for (int64_t i = 0; i < plan->scale_numel; i++)
        if (zero_point[i] < t->qmin || zero_point[i] > t->qmax)
            return quant_fail(
                err, QUANT_ERR_ARG, "zero point %d (scale %lld) is outside %s's range %d..%d",
                (int)zero_point[i], (long long)i, t->name, (int)t->qmin, (int)t->qmax);
    return QUANT_OK;
}

bool quant_how_asymmetric(const quant_how *how)
{
    quant_calib_method m;
    return how && quant_calib_parse(how->calibration, &m, NULL) == QUANT_OK && m.asymmetric;
}
