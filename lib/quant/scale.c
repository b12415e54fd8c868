/* scale.c -- scale and zero point from a calibration (SPEC section 4), with the tiny-scale rule
 * and rounding to the scale dtype before the zero point is derived.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <float.h>

#include "internal.h"
#include "numerics.h"

/* sqrt(FLT_MIN) = 2^-63 exactly. */
#define QUANT_TINY QN_TINY_SCALE

/* Rounds s to the scale dtype (nearest even) and back to float32. */
static float round_scale(float s, quant_dtype dtype)
{
    switch (dtype) {
    case QUANT_DTYPE_BF16:
        return qn_bf16_to_f32(qn_f32_to_bf16(s));
    case QUANT_DTYPE_F16:
        return qn_f16_to_f32(qn_f32_to_f16(s));
    default:
        return s;
    }
}

static quant_status finish_scale(float s, quant_dtype dtype, int64_t i, float *out,
                                 quant_error *err)
{
    if (s < QUANT_TINY) s = 1.0f;
    float r = round_scale(s, dtype);
    if (!(r > 0.0f) || qn_nonfinite(r))
        return quant_fail(err, QUANT_ERR_RANGE,
                          "scale %g (element %lld) is not representable as a positive finite %s",
                          (double)s, (long long)i, quant_dtype_name(dtype));
    *out = r;
    return QUANT_OK;
}

/* SPEC 2b: the MX power of two, or nvfp4's e_b under the plan's global scale g, by the kernel
 * set's vector form (the scalar one when it declines: a negative or non-finite absmax). */
static quant_status microscaling_range(const quant_kernels *k, const quant_plan *plan,
                                       const quant_calibration *calib, int64_t n, float *scale,
                                       int64_t first, quant_error *err)
{
    const quant_qtype_traits *t = plan->traits;
    if (t->scale_kind == QUANT_SCALE_MX) {
        if (k->mx_scales(calib->absmax, n, t->symmetric_bound, t->scale_constant, scale))
            quant_generic_mx_scales(calib->absmax, n, t->symmetric_bound, t->scale_constant, scale);
        for (int64_t i = 0; i < n; i++) {
            if (qn_nonfinite(scale[i])) /* only from an absmax near FLT_MAX times a factor */
                return quant_fail(err, QUANT_ERR_RANGE,
                                  "%s scale of absmax %g (element %lld) is not finite", t->name,
                                  (double)calib->absmax[i], (long long)(first + i));
        }
        return QUANT_OK;
    }
    float g = plan->global_scale;
    if (!(g > 0.0f) || qn_nonfinite(g))
        return quant_fail(err, QUANT_ERR_ARG,
                          "nvfp4 needs the tensor's global scale (how->global_scale, from "
                          "quant_nvfp4_global_scale of the tensor's absmax)");
    if (k->nvfp4_scales(calib->absmax, n, g, scale))
        quant_generic_nvfp4_scales(calib->absmax, n, g, scale);
    return QUANT_OK;
}

quant_status quant_scale_range(const quant_kernels *k, const quant_plan *plan,
                               quant_dtype scale_dtype, const quant_calibration *calib, int64_t n,
                               float *scale, int32_t *zero_point, int64_t first, quant_error *err)
{
    const quant_qtype_traits *t = plan->traits;
    if (t->scale_kind != QUANT_SCALE_LINEAR)
        return microscaling_range(k ? k : &quant_kernels_generic, plan, calib, n, scale, first,
                                  err);
    if (!calib->asymmetric && scale_dtype == QUANT_DTYPE_F32 &&
        !(k ? k : &quant_kernels_generic)->lin_scales(calib->absmax, n, t->symmetric_bound, scale))
        return QUANT_OK; /* the common case, in the kernel set's vector form */
    if (!calib->asymmetric) {
        for (int64_t i = 0; i < n; i++)
            QUANT_RETURN_IF_ERR(finish_scale(calib->absmax[i] / t->symmetric_bound, scale_dtype,
                                             first + i, &scale[i], err));
        return QUANT_OK;
    }
    float qmin = (float)t->qmin, qmax = (float)t->qmax;
    for (int64_t i = 0; i < n; i++) {
        float s = (calib->max[i] - calib->min[i]) / (qmax - qmin);
        QUANT_RETURN_IF_ERR(finish_scale(s, scale_dtype, first + i, &scale[i], err));
        zero_point[i] = qn_convert_int(qmin - calib->min[i] / scale[i], qmin, qmax);
    }
    return QUANT_OK;
}

quant_status quant_compute_scale(const quant_how *how, const quant_calibration *calib, int64_t n,
                                 float *scale, int32_t *zero_point, quant_error *err)
{
    quant_error_clear(err);
    quant_plan plan;
    QUANT_RETURN_IF_ERR(quant_plan_check_how(how, &plan, err));
    if (!calib || !scale || n < 0) return quant_fail(err, QUANT_ERR_ARG, "NULL argument or n < 0");
    if (calib->asymmetric && !plan.traits->asymmetric_allowed)
        return quant_fail(err, QUANT_ERR_ASYMMETRIC, "%s does not allow asymmetric quantization",
                          plan.traits->name);
    if (calib->asymmetric ? (!calib->min || !calib->max || !zero_point) : !calib->absmax)
        return quant_fail(err, QUANT_ERR_ARG, "calibration arrays or zero_point are NULL");
    return quant_scale_range(NULL, &plan, how->scale_dtype, calib, n, scale, zero_point, 0, err);
}
