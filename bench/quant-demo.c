/* quant-demo.c -- what `make run` starts until the daemon exists: fake-quantizes a generated
 * 256x512 f32 tensor (with a few outliers) with every qtype and prints the size of the codes,
 * the SQNR and the largest absolute error of each.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

#define DEMO_ROWS     256
#define DEMO_COLS     512
#define DEMO_OUTLIERS 6

/* One line of the table: a qtype with a calibration and a granularity. */
typedef struct demo_case {
    quant_qtype qtype;
    const char *calibration; /* NULL = absmax */
    int64_t tile;            /* tile length along axis 1, or 0 for one scale per row */
} demo_case;

typedef struct demo_result {
    int64_t code_bytes;
    double sqnr_db; /* +inf when the round trip is exact */
    double max_abs_err;
} demo_result;

typedef struct demo {
    float *x, *xq;
    quant_tensor x_view, xq_view;
    quant_ctx *ctx;
} demo;

/* ---- deterministic input --------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Sum of 4 uniforms in [-0.5, 0.5), scaled to unit variance. */
static float normalish(uint64_t *state)
{
    double sum = 0.0;
    for (int k = 0; k < 4; k++) sum += (double)(splitmix64(state) >> 11) * 0x1p-53 - 0.5;
    return (float)(sum * sqrt(3.0));
}

/* Unit-variance values, rows scaled 0.25x..2x, and a few outliers of +-8..16. */
static void fill_input(float *x)
{
    uint64_t state = 0xdec0de;
    for (int64_t r = 0; r < DEMO_ROWS; r++) {
        float row_scale = 0.25f + 1.75f * (float)r / (float)(DEMO_ROWS - 1);
        for (int64_t c = 0; c < DEMO_COLS; c++)
            x[r * DEMO_COLS + c] = row_scale * normalish(&state);
    }
    for (int k = 0; k < DEMO_OUTLIERS; k++) {
        uint64_t at = splitmix64(&state) % (DEMO_ROWS * DEMO_COLS);
        float magnitude = 8.0f + 8.0f * (float)(splitmix64(&state) >> 40) * 0x1p-24f;
        x[at] = (k % 2 ? -1.0f : 1.0f) * magnitude;
    }
}

/* ---- one case -------------------------------------------------------------------------------- */

static void how_for_case(const demo_case *dc, quant_how *how)
{
    quant_how_init(how, dc->qtype);
    how->n_channel_axes = 1;
    how->channel_axes[0] = 0;
    how->calibration = dc->calibration;
    if (dc->tile > 0) {
        how->n_tiles = 1;
        how->tiles[0] = (quant_tile){.axis = 1, .size = dc->tile, .fraction = 0.0};
    }
}

static void compare(const float *x, const float *xq, int64_t n, demo_result *res)
{
    double signal = 0.0, noise = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)x[i] - (double)xq[i];
        signal += (double)x[i] * (double)x[i];
        noise += e * e;
        worst = fabs(e) > worst ? fabs(e) : worst;
    }
    res->sqnr_db = noise > 0.0 ? 10.0 * log10(signal / noise) : INFINITY;
    res->max_abs_err = worst;
}

static int run_case(demo *d, const demo_case *dc, demo_result *res)
{
    quant_how how;
    quant_error err;
    how_for_case(dc, &how);
    const char *name = quant_qtype_traits_get(dc->qtype)->name;
    quant_status st = quant_fake_quant(d->ctx, &how, &d->x_view, &d->xq_view, &err);
    if (st != QUANT_OK) {
        fprintf(stderr, "quant-demo: quant_fake_quant (%s, %s) failed: %s: %s\n", name,
                dc->calibration ? dc->calibration : "absmax", quant_status_str(st), err.message);
        return -1;
    }
    res->code_bytes = quant_qvalue_bytes(&how, d->x_view.rank, d->x_view.shape);
    if (res->code_bytes < 0) {
        fprintf(stderr, "quant-demo: quant_qvalue_bytes (%s) failed\n", name);
        return -1;
    }
    compare(d->x, d->xq, DEMO_ROWS * DEMO_COLS, res);
    return 0;
}

/* ---- output ---------------------------------------------------------------------------------- */

static void print_table_head(void)
{
    printf("| %-13s | %-11s | %-11s | %10s | %8s | %11s |\n", "qtype", "calibration", "granularity",
           "code bytes", "SQNR dB", "max abs err");
    printf("|:--------------|:------------|:------------|-----------:|---------:|------------:|\n");
}

static void print_row(const demo_case *dc, const demo_result *res)
{
    char granularity[32];
    if (dc->tile > 0)
        snprintf(granularity, sizeof granularity, "tile %lld", (long long)dc->tile);
    else
        snprintf(granularity, sizeof granularity, "per-channel");
    printf("| %-13s | %-11s | %-11s | %10lld | %8.2f | %11.5f |\n",
           quant_qtype_traits_get(dc->qtype)->name, dc->calibration ? dc->calibration : "absmax",
           granularity, (long long)res->code_bytes, res->sqnr_db, res->max_abs_err);
}

/* Every qtype with absmax per row; int8 also with minmax, int4 also with tiles of 128, and the
 * unsigned qtypes also with minmax (absmax gives them no zero point, so negatives clip to 0). */
static int run_qtype(demo *d, quant_qtype qtype)
{
    demo_case cases[2] = {{qtype, NULL, 0}, {qtype, NULL, 0}};
    int n = 1;
    if (qtype == QUANT_QTYPE_INT8 || qtype == QUANT_QTYPE_UINT4 || qtype == QUANT_QTYPE_UINT8)
        cases[n++].calibration = "minmax";
    if (qtype == QUANT_QTYPE_INT4) cases[n++].tile = 128;
    for (int i = 0; i < n; i++) {
        demo_result res;
        if (run_case(d, &cases[i], &res) != 0) return -1;
        print_row(&cases[i], &res);
    }
    return 0;
}

/* ---- main ------------------------------------------------------------------------------------ */

static int demo_open(demo *d)
{
    const int64_t shape[2] = {DEMO_ROWS, DEMO_COLS};
    quant_error err;
    d->x = malloc(DEMO_ROWS * DEMO_COLS * sizeof *d->x);
    d->xq = malloc(DEMO_ROWS * DEMO_COLS * sizeof *d->xq);
    if (!d->x || !d->xq) {
        fprintf(stderr, "quant-demo: out of memory\n");
        return -1;
    }
    fill_input(d->x);
    d->ctx = quant_ctx_new(NULL, &err);
    if (!d->ctx ||
        quant_tensor_init(&d->x_view, QUANT_DTYPE_F32, 2, shape, d->x, &err) != QUANT_OK ||
        quant_tensor_init(&d->xq_view, QUANT_DTYPE_F32, 2, shape, d->xq, &err) != QUANT_OK) {
        fprintf(stderr, "quant-demo: setup failed: %s\n", err.message);
        return -1;
    }
    return 0;
}

static void demo_close(demo *d)
{
    quant_ctx_free(d->ctx);
    free(d->x);
    free(d->xq);
}

int main(void)
{
    demo d;
    memset(&d, 0, sizeof d);
    int rc = demo_open(&d);
    if (rc == 0) {
        printf("quant-demo: a demo until the daemon exists -- fake-quantizes a %dx%d f32 tensor "
               "(%d outliers), scales per row (channel axis 0), ISA %s, %d threads\n\n",
               DEMO_ROWS, DEMO_COLS, DEMO_OUTLIERS, quant_isa_name(quant_ctx_isa(d.ctx)),
               quant_ctx_threads(d.ctx));
        print_table_head();
    }
    for (int q = QUANT_QTYPE_INT2; rc == 0 && q <= QUANT_QTYPE_FP8_E5M2; q++)
        if (quant_qtype_traits_get((quant_qtype)q)) rc = run_qtype(&d, (quant_qtype)q);
    demo_close(&d);
    return rc == 0 ? 0 : 1;
}
