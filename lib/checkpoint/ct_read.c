/* ct_read.c -- quant_ct_read(): the quantized weights of a compressed-tensors file. Each
 * P.weight_scale names a module P; its codes are P.weight_packed (pack-quantized I32, or U8
 * e2m1 pairs: nvfp4 with a P.weight_global_scale, else mxfp4) or P.weight (I8 integers;
 * F8_E4M3: mxfp8 with U8 E8M0 scales, else fp8). The form, checked against the config group's
 * format when the module has one, gives the qtype; the scale's shape gives the strategy
 * (tensor [1], channel [out, 1], group [out, in/g], block [out/bh, in/bw]) as the quant_how
 * that quant_dequantize() decodes with. The writer is layout_ct.c.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_internal.h"
#include "ct_read.h"

/* Per form: its default format name (without a config group), bits, qtype (ints: by bits). */
static const struct {
    const char *format;
    int bits;
    quant_qtype qtype;
    bool pack; /* quant_how.pack: two e2m1 codes a byte */
} forms[QUANT_CT_FORMS] = {
    [QUANT_CT_INT8] = {"int-quantized", 8, QUANT_QTYPE_INT8, false},
    [QUANT_CT_PACK32] = {"pack-quantized", 0, QUANT_QTYPE_INT8, false},
    [QUANT_CT_FP8] = {"float-quantized", 8, QUANT_QTYPE_FP8_E4M3FN, false},
    [QUANT_CT_MXFP4] = {"mxfp4-pack-quantized", 4, QUANT_QTYPE_MXFP4, true},
    [QUANT_CT_MXFP8] = {"mxfp8-quantized", 8, QUANT_QTYPE_MXFP8, false},
    [QUANT_CT_NVFP4] = {"nvfp4-pack-quantized", 4, QUANT_QTYPE_NVFP4, true},
};

static const char suffix_scale[] = ".weight_scale";

static const quant_st_tensor *part(const quant_st_file *f, const char *module, const char *suffix)
{
    char buf[4096];
    if ((size_t)snprintf(buf, sizeof buf, "%s.%s", module, suffix) >= sizeof buf) return NULL;
    return quant_st_find(f, buf);
}

/* The module P of a tensor named P.weight_scale, into buf; false for other names. */
static bool scale_module(const char *name, char *buf, size_t cap)
{
    size_t n = strlen(name), m = sizeof suffix_scale - 1;
    if (n <= m || strcmp(name + n - m, suffix_scale) != 0 || n - m >= cap) return false;
    memcpy(buf, name, n - m);
    buf[n - m] = '\0';
    return true;
}

/* A dtype a float model's weight has (fp8 is a compressed-tensors code). */
static bool is_float_st(quant_st_dtype d)
{
    return d == QUANT_ST_F32 || d == QUANT_ST_BF16 || d == QUANT_ST_F16 || d == QUANT_ST_F64;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

bool quant_ct_looks_like(const quant_st_file *f)
{
    char module[4096];
    for (size_t i = 0; f && i < f->n_tensors; i++) {
        const char *name = f->tensors[i].name;
        if (ends_with(name, ".weight_packed") || ends_with(name, ".weight_global_scale"))
            return true;
        if (!scale_module(name, module, sizeof module)) continue;
        const quant_st_tensor *w = part(f, module, "weight");
        if (w && !is_float_st(w->dtype)) return true;
    }
    return false;
}

/* ---- the form of a weight ---------------------------------------------------------------------
 */

/* The forms by the codes' tensor and dtype, the scale's dtype and the global scale's presence;
 * the first row that fits. */
enum { ANY = -1 };
static const struct {
    bool packed;         /* P.weight_packed, else P.weight */
    quant_st_dtype data; /* its dtype */
    int scale;           /* P.weight_scale's dtype, or ANY */
    int global;          /* P.weight_global_scale: 1 there, 0 absent, ANY */
    quant_ct_form form;
} form_table[] = {
    {true, QUANT_ST_I32, ANY, ANY, QUANT_CT_PACK32},
    {true, QUANT_ST_U8, ANY, 1, QUANT_CT_NVFP4},
    {true, QUANT_ST_U8, QUANT_ST_U8, 0, QUANT_CT_MXFP4},
    {false, QUANT_ST_I8, ANY, ANY, QUANT_CT_INT8},
    {false, QUANT_ST_F8_E4M3, QUANT_ST_U8, ANY, QUANT_CT_MXFP8},
    {false, QUANT_ST_F8_E4M3, ANY, ANY, QUANT_CT_FP8},
};

static bool form_fits(size_t i, bool packed, quant_st_dtype d, quant_st_dtype scale, bool global)
{
    return form_table[i].packed == packed && form_table[i].data == d &&
           (form_table[i].scale == ANY || form_table[i].scale == (int)scale) &&
           (form_table[i].global == ANY || form_table[i].global == (int)global);
}

/* Why no row of form_table fits. */
static quant_ck_status no_form(const quant_ct_tensor *e, const char *module, bool packed,
                               quant_ck_error *err)
{
    quant_st_dtype d = e->data->dtype;
    if (packed && d == QUANT_ST_U8 && e->scale->dtype == QUANT_ST_F8_E4M3)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': nvfp4 (F8_E4M3 block scales) needs "
                             "%s.weight_global_scale, and there is none",
                             e->data->name, module);
    if (!packed && is_float_st(d))
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "tensor '%s.weight' is %s beside a weight_scale: a float weight is "
                             "not compressed (compressed-tensors' quantization_status "
                             "\"frozen\"?); nothing to decode",
                             module, quant_st_dtype_name(d));
    return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                         "tensor '%s': %s with a %s weight_scale is no compressed-tensors weight "
                         "this reader decodes (weight_packed I32, or U8 with U8 E8M0 scales or "
                         "a weight_global_scale; weight I8 or F8_E4M3)",
                         e->data->name, quant_st_dtype_name(d),
                         quant_st_dtype_name(e->scale->dtype));
}

static quant_ck_status form_of(quant_ct_tensor *e, const char *module, const quant_st_file *f,
                               quant_ck_error *err)
{
    const quant_st_tensor *packed = part(f, module, "weight_packed");
    e->global_scale = part(f, module, "weight_global_scale");
    e->data = packed ? packed : part(f, module, "weight");
    if (!e->data)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s.weight_scale': no %s.weight_packed or %s.weight beside it",
                             module, module, module);
    if (packed && part(f, module, "weight"))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s.weight' beside %s.weight_packed: the weight is decoded "
                             "to that name, so the file would hold it twice",
                             module, module);
    size_t i = 0, n = sizeof form_table / sizeof form_table[0];
    while (i < n &&
           !form_fits(i, packed != NULL, e->data->dtype, e->scale->dtype, e->global_scale != NULL))
        i++;
    if (i == n) return no_form(e, module, packed != NULL, err);
    e->form = form_table[i].form;
    if (part(f, module, "weight_g_idx"))
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "tensor '%s.weight_g_idx': activation ordering (actorder) is not "
                             "decoded; only weights whose groups follow the input order",
                             module);
    return QUANT_CK_OK;
}

/* The format: the config group's, which must hold the form, else the form's own. */
static quant_ck_status format_of(quant_ct_tensor *e, const ct_group *g, quant_ck_error *err)
{
    e->format = forms[e->form].format;
    if (!g) return QUANT_CK_OK;
    if (!ct_format_holds(g->format, e->form))
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "tensor '%s' (%s): its config group '%s' says format '%s', which "
                             "does not store a weight this way (read as %s)",
                             e->data->name, quant_st_dtype_name(e->data->dtype), g->name, g->format,
                             forms[e->form].format);
    e->format = g->format;
    return QUANT_CK_OK;
}

/* ---- shape and bits ---------------------------------------------------------------------------
 */

static quant_ck_status read_weight_shape(quant_ct_tensor *e, const quant_st_file *f,
                                         const char *module, quant_ck_error *err)
{
    e->shape_t = part(f, module, "weight_shape");
    const quant_st_tensor *s = e->shape_t;
    if (!s || s->rank != 1 || s->shape[0] != 2 ||
        (s->dtype != QUANT_ST_I64 && s->dtype != QUANT_ST_I32))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s.weight_packed': pack-quantized needs %s.weight_shape, "
                             "I64 or I32 [2]%s",
                             module, module, s ? ", and it is not" : ", and there is none");
    unsigned char raw[16];
    quant_ck_status st = quant_st_read(f, s, 0, raw, (size_t)quant_st_nbytes(s), err);
    for (int i = 0; st == QUANT_CK_OK && i < 2; i++) {
        int64_t v;
        if (s->dtype == QUANT_ST_I64) {
            memcpy(&v, raw + 8 * i, 8);
        } else {
            int32_t v32;
            memcpy(&v32, raw + 4 * i, 4);
            v = v32;
        }
        e->shape[i] = v;
        if (v < 1 || v > ((int64_t)1 << 40))
            st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                               "tensor '%s.weight_shape': [%d] = %lld is not a size", module, i,
                               (long long)v);
    }
    return st;
}

static quant_ck_status weight_shape(quant_ct_tensor *e, const quant_st_file *f, const char *module,
                                    quant_ck_error *err)
{
    const quant_st_tensor *d = e->data;
    if (d->rank != 2)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "tensor '%s': rank %d, want 2 ([out, in])",
                             d->name, d->rank);
    if (e->form == QUANT_CT_PACK32) {
        quant_ck_status st = read_weight_shape(e, f, module, err);
        if (st == QUANT_CK_OK && e->shape[0] != d->shape[0])
            st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                               "tensor '%s': %lld rows, but weight_shape says %lld", d->name,
                               (long long)d->shape[0], (long long)e->shape[0]);
        return st;
    }
    bool fp4 = forms[e->form].pack;
    e->shape[0] = d->shape[0];
    e->shape[1] = fp4 ? 2 * d->shape[1] : d->shape[1];
    if (e->shape[0] < 1 || e->shape[1] < 1)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': shape [%lld, %lld] holds no weights", d->name,
                             (long long)d->shape[0], (long long)d->shape[1]);
    return QUANT_CK_OK;
}

/* The widths 2..8 whose dense packing of `in` codes takes `words` int32 words. */
static int bits_fitting(int64_t in, int64_t words, int *only)
{
    int n = 0;
    for (int b = 2; b <= 8; b++)
        if (ck_pack32_words(in, b) == words) *only = b, n++;
    return n;
}

/* Whether release string `v` ("0.17.1", "0.12.3.dev4") is before major.minor. */
static bool release_before(const char *v, int major, int minor)
{
    int a = 0, b = 0;
    if (sscanf(v, "%d.%d", &a, &b) != 2) return false;
    return a < major || (a == major && b < minor);
}

static quant_ck_status packed_bits(quant_ct_tensor *e, const ct_group *g, quant_ck_error *err)
{
    int64_t in = e->shape[1], words = e->data->shape[1];
    if (g && g->bits) {
        e->bits = g->bits;
        if (e->bits < 2 || e->bits > 8)
            return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                                 "tensor '%s': config group '%s' has num_bits %d; pack-quantized "
                                 "weights of 2..8 bits are decoded",
                                 e->data->name, g->name, e->bits);
    } else {
        int fits = bits_fitting(in, words, &e->bits);
        if (fits != 1)
            return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                                 "tensor '%s': num_bits is not known (no config group names the "
                                 "module) and %lld words a row fit %s width of 2..8 bits for "
                                 "%lld inputs; dequantize the checkpoint directory, whose "
                                 "config.json says",
                                 e->data->name, (long long)words, fits ? "more than one" : "no",
                                 (long long)in);
    }
    if (g && g->version && e->bits != 2 && e->bits != 4 && e->bits != 8 &&
        release_before(g->version, 0, 18))
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "tensor '%s': config.json says compressed-tensors %s wrote it, which "
                             "packs int%d codes whole into each int32 word (up to 0.17.1; dense "
                             "packing from 0.18.0); that packing is not decoded",
                             e->data->name, g->version, e->bits);
    int64_t want = ck_pack32_words(in, e->bits), old = (in + 32 / e->bits - 1) / (32 / e->bits);
    if (words != want)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': wrong packed shape [%lld, %lld]: %lld int%d codes a row "
                             "packed densely take %lld int32 words%s",
                             e->data->name, (long long)e->data->shape[0], (long long)words,
                             (long long)in, e->bits, (long long)want,
                             words == old ? " (this is compressed-tensors' packing of whole codes "
                                            "a word up to 0.17.1, which is not decoded)"
                                          : "");
    return QUANT_CK_OK;
}

static quant_ck_status bits_of(quant_ct_tensor *e, const ct_group *g, quant_ck_error *err)
{
    if (e->form == QUANT_CT_PACK32) {
        quant_ck_status st = packed_bits(e, g, err);
        if (st != QUANT_CK_OK) return st;
    } else {
        e->bits = forms[e->form].bits;
        if (e->form == QUANT_CT_INT8 && g && g->bits >= 2 && g->bits <= 8) e->bits = g->bits;
    }
    bool is_int = e->form == QUANT_CT_INT8 || e->form == QUANT_CT_PACK32;
    quant_how_init(&e->how,
                   is_int ? (quant_qtype)(QUANT_QTYPE_INT2 + e->bits - 2) : forms[e->form].qtype);
    e->how.pack = forms[e->form].pack;
    e->how.scale_dtype = QUANT_DTYPE_F32;
    return QUANT_CK_OK;
}

/* ---- scale, zero point, global scale ----------------------------------------------------------
 */

static bool scale_dtype_ok(const quant_ct_tensor *e)
{
    quant_st_dtype d = e->scale->dtype;
    if (e->form == QUANT_CT_MXFP4 || e->form == QUANT_CT_MXFP8) return d == QUANT_ST_U8;
    if (e->form == QUANT_CT_NVFP4) return d == QUANT_ST_F8_E4M3;
    return d == QUANT_ST_F32 || d == QUANT_ST_BF16 || d == QUANT_ST_F16 || d == QUANT_ST_F64;
}

/* The scale's [s0, s1]: [1] or [1, 1] per tensor, else rank 2. */
static bool scale_dims(const quant_st_tensor *s, int64_t sd[2])
{
    if (s->rank == 1 && s->shape[0] == 1) {
        sd[0] = sd[1] = 1;
        return true;
    }
    if (s->rank != 2) return false;
    sd[0] = s->shape[0];
    sd[1] = s->shape[1];
    return true;
}

/* The axes of the scale: equal to the weight's dim (channelwise), 1 (reduced), a divisor
 * (tiled); microscaling qtypes are tiled on the input axis by their fixed group. */
static quant_ck_status scale_axes(quant_ct_tensor *e, const int64_t sd[2], quant_ck_error *err)
{
    int64_t fixed = quant_qtype_traits_get(e->how.qtype)->fixed_tile;
    for (int a = 0; a < 2; a++) {
        int64_t d = e->shape[a], s = sd[a];
        if (a == 1 && fixed) {
            if (s * fixed != d) break;
            e->how.tiles[e->how.n_tiles++] = (quant_tile){.axis = 1, .size = fixed};
        } else if (s == d && d > 1) {
            e->how.channel_axes[e->how.n_channel_axes++] = a;
        } else if (s > 1 && s < d && d % s == 0) {
            e->how.tiles[e->how.n_tiles++] = (quant_tile){.axis = a, .size = d / s};
        } else if (s != 1) {
            return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                                 "tensor '%s': scale shape [%lld, %lld] does not divide the "
                                 "weight [%lld, %lld] into whole groups on axis %d",
                                 e->scale->name, (long long)sd[0], (long long)sd[1],
                                 (long long)e->shape[0], (long long)e->shape[1], a);
        }
    }
    int64_t want[2];
    quant_error qe;
    if (quant_scale_shape(&e->how, 2, e->shape, want, &qe) != QUANT_OK || want[0] != sd[0] ||
        want[1] != sd[1])
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': scale shape [%lld, %lld] does not fit %s weight "
                             "[%lld, %lld]",
                             e->scale->name, (long long)sd[0], (long long)sd[1], e->format,
                             (long long)e->shape[0], (long long)e->shape[1]);
    return QUANT_CK_OK;
}

static quant_ck_status zero_point_of(quant_ct_tensor *e, const int64_t sd[2], quant_ck_error *err)
{
    const quant_st_tensor *z = e->zero_point;
    if (!z) return QUANT_CK_OK;
    bool is_int = e->form == QUANT_CT_INT8 || e->form == QUANT_CT_PACK32;
    if (!is_int)
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "tensor '%s': %s weights are symmetric; a zero point is not decoded",
                             z->name, e->format);
    e->how.calibration = "minmax";
    /* compressed-tensors packs the zero point (I32 words along dim 0) only for pack-quantized
     * channel and group, whose scales have a row per weight row; tensor and block ones are I8
     * like the scale. A weight of one row tells the two apart by the zero point's dtype and rank
     * alone: a scale [1] is a tensor's, or a channel's written rank 1 (layout_ct.c does). */
    e->zp_packed = e->form == QUANT_CT_PACK32 && sd[0] == e->shape[0] &&
                   (e->shape[0] > 1 || (z->dtype == QUANT_ST_I32 && z->rank == 2));
    bool ok = e->zp_packed
                  ? z->dtype == QUANT_ST_I32 && z->rank == 2 &&
                        z->shape[0] == ck_pack32_words(sd[0], e->bits) && z->shape[1] == sd[1]
                  : (z->dtype == QUANT_ST_I8 || z->dtype == QUANT_ST_U8 ||
                     z->dtype == QUANT_ST_I16 || z->dtype == QUANT_ST_I32) &&
                        quant_numel(z->rank, z->shape) == sd[0] * sd[1];
    if (!ok)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "tensor '%s': %s, want %s", z->name,
                             quant_st_dtype_name(z->dtype),
                             e->zp_packed ? "I32 [ceil(rows * bits / 32), groups] (packed along "
                                            "dim 0)"
                                          : "I8 shaped like the scale");
    return QUANT_CK_OK;
}

static quant_ck_status scales_of(quant_ct_tensor *e, quant_ck_error *err)
{
    int64_t sd[2];
    if (!scale_dtype_ok(e) || !scale_dims(e->scale, sd))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "tensor '%s': %s of rank %d is not a %s scale (%s)", e->scale->name,
                             quant_st_dtype_name(e->scale->dtype), e->scale->rank, e->format,
                             e->form == QUANT_CT_NVFP4   ? "F8_E4M3 [out, in/16]"
                             : e->form == QUANT_CT_MXFP4 ? "U8 E8M0 [out, in/32]"
                             : e->form == QUANT_CT_MXFP8 ? "U8 E8M0 [out, in/32]"
                                                         : "F32, BF16 or F16 [1] or [a, b]");
    quant_ck_status st = scale_axes(e, sd, err);
    if (st == QUANT_CK_OK) st = zero_point_of(e, sd, err);
    const quant_st_tensor *g = e->global_scale;
    if (st == QUANT_CK_OK && e->form == QUANT_CT_NVFP4 &&
        (g->dtype != QUANT_ST_F32 || quant_numel(g->rank, g->shape) != 1))
        st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "tensor '%s': %s, want F32 [1]", g->name,
                           quant_st_dtype_name(g->dtype));
    if (st == QUANT_CK_OK && e->form != QUANT_CT_PACK32 &&
        quant_st_nbytes(e->data) != (uint64_t)quant_qvalue_bytes(&e->how, 2, e->shape))
        st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "tensor '%s': %llu bytes, want %lld",
                           e->data->name, (unsigned long long)quant_st_nbytes(e->data),
                           (long long)quant_qvalue_bytes(&e->how, 2, e->shape));
    return st;
}

/* ---- one weight, the file ---------------------------------------------------------------------
 */

static quant_ck_status read_entry(quant_ct_tensor *e, const quant_st_file *f,
                                  const quant_st_tensor *scale, const char *module,
                                  const quant_ct_config *cfg, quant_ck_error *err)
{
    memset(e, 0, sizeof *e);
    e->scale = scale;
    e->zero_point = part(f, module, "weight_zero_point");
    size_t len = strlen(module) + sizeof ".weight";
    if (!(e->name = malloc(len))) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    snprintf(e->name, len, "%s.weight", module);
    const ct_group *g = ct_config_group(cfg, module);
    quant_ck_status st = form_of(e, module, f, err);
    if (st == QUANT_CK_OK) st = format_of(e, g, err);
    if (st == QUANT_CK_OK) st = weight_shape(e, f, module, err);
    if (st == QUANT_CK_OK) st = bits_of(e, g, err);
    if (st == QUANT_CK_OK) st = scales_of(e, err);
    return st;
}

static void own(quant_ct *c, const quant_st_tensor *t, const quant_ct_tensor *e)
{
    if (t) c->owner_[t - c->file->tensors] = e;
}

/* A part of a quantized weight that no P.weight_scale claimed: copying it would pass codes off
 * as a float tensor (a non-float P.weight among them). */
static quant_ck_status orphan_parts(const quant_ct *c, quant_ck_error *err)
{
    static const char *const parts[] = {".weight_packed", ".weight_zero_point",
                                        ".weight_global_scale", ".weight_shape", ".weight_g_idx"};
    for (size_t i = 0; i < c->file->n_tensors; i++) {
        const quant_st_tensor *t = &c->file->tensors[i];
        if (c->owner_[i]) continue;
        bool orphan = ends_with(t->name, ".weight") && !is_float_st(t->dtype);
        for (size_t k = 0; !orphan && k < sizeof parts / sizeof parts[0]; k++)
            orphan = ends_with(t->name, parts[k]);
        if (orphan)
            return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                                 "tensor '%s' (%s): a part of a compressed-tensors weight, but its "
                                 "module has no weight_scale",
                                 t->name, quant_st_dtype_name(t->dtype));
    }
    return QUANT_CK_OK;
}

static quant_ck_status read_all(quant_ct *c, const quant_ct_config *cfg, quant_ck_error *err)
{
    const quant_st_file *f = c->file;
    c->tensors = calloc(f->n_tensors + 1, sizeof *c->tensors);
    c->owner_ = calloc(f->n_tensors + 1, sizeof *c->owner_);
    if (!c->tensors || !c->owner_) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    char module[4096];
    for (size_t i = 0; i < f->n_tensors; i++) {
        if (!scale_module(f->tensors[i].name, module, sizeof module)) continue;
        quant_ct_tensor *e = &c->tensors[c->n];
        quant_ck_status st = read_entry(e, f, &f->tensors[i], module, cfg, err);
        c->n++; /* counted even on failure: its name is freed with the rest */
        if (st != QUANT_CK_OK) return st;
        own(c, e->data, e);
        own(c, e->scale, e);
        own(c, e->zero_point, e);
        own(c, e->global_scale, e);
        own(c, e->shape_t, e);
    }
    return orphan_parts(c, err);
}

quant_ck_status quant_ct_read(const quant_st_file *f, const quant_ct_config *cfg, quant_ct *out,
                              quant_ck_error *err)
{
    if (!out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    memset(out, 0, sizeof *out);
    if (!f) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    out->file = f;
    quant_ck_status st = read_all(out, cfg, err);
    if (st != QUANT_CK_OK) {
        quant_ck_prefix(err, "%s", f->path);
        quant_ct_free(out);
    }
    return st;
}

const quant_ct_tensor *quant_ct_owner(const quant_ct *c, const quant_st_tensor *t)
{
    if (!c || !c->owner_ || !t || t < c->file->tensors ||
        t >= c->file->tensors + c->file->n_tensors)
        return NULL;
    return c->owner_[t - c->file->tensors];
}

void quant_ct_free(quant_ct *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) free(c->tensors[i].name);
    free(c->tensors);
    free(c->owner_);
    memset(c, 0, sizeof *c);
}
