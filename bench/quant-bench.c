/* quant-bench.c -- libquant kernel throughput (GB/s) beside a read-only max|x| pass and memcpy
 * measured in the same run, with one thread and with all online CPUs; prints a Markdown table.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The default tensor is larger than the last-level cache, so every pass streams from memory: 4096
 * columns and as many rows as make at least LLC_FACTOR times the LLC size (sysconf, else sysfs;
 * 64 MiB when neither tells), capped at a quarter of the physical memory (the run holds the f32
 * tensor, its bf16 copy, an f32 output and the codes: about 2.8 times the tensor).
 *
 * Environment: QUANT_BENCH_MIB (tensor size in MiB of f32, overrides the LLC rule),
 * QUANT_BENCH_ROWS, QUANT_BENCH_COLS (override both), QUANT_BENCH_REPS (timed runs after one
 * warm-up, best kept; default 5), QUANT_ISA (kernel set), QUANT_BENCH_ONLY (time only the
 * kernels whose label holds one of these '|'-separated texts; the baselines always run).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "quant.h"

#define DEFAULT_COLS   4096
#define LLC_FACTOR     2 /* the tensor is at least this many times the LLC */
#define FALLBACK_LLC   (64L << 20)
#define RAM_FRACTION   4 /* the tensor is at most 1/RAM_FRACTION of the physical memory */
#define DEFAULT_REPS   5
#define LARGEST_TILE   128 /* the columns must divide by every tile size used below */
#define BUFFER_ALIGN   64
#define LABEL_MAX      64
#define COLUMNS        2 /* 0: one thread, 1: all online CPUs */
#define MAX_ROWS_SHOWN 22

/* ---- one kernel to time ---------------------------------------------------------------------- */

typedef struct kernel_case {
    const char *label;
    quant_qtype qtype;
    const char *calibration; /* NULL = absmax */
    bool given_global;       /* nvfp4: pass the tensor's global scale (no second pass) */
    int64_t tile;            /* tile length along axis 1, or 0 for one scale per row */
    bool bf16_input;         /* quantize the BF16 copy of the tensor instead of the f32 one */
    bool dequantize;         /* time quant_dequantize() of the codes (GB/s of f32 output) */
} kernel_case;

static const kernel_case kernel_cases[] = {
    {"int8 per-channel absmax", QUANT_QTYPE_INT8, NULL, false, 0, false, false},
    {"int8 tile 32", QUANT_QTYPE_INT8, NULL, false, 32, false, false},
    {"int4 tile 32 (packed)", QUANT_QTYPE_INT4, NULL, false, 32, false, false},
    {"int4 tile 128 (packed)", QUANT_QTYPE_INT4, NULL, false, 128, false, false},
    {"fp8 e4m3fn per-channel", QUANT_QTYPE_FP8_E4M3FN, NULL, false, 0, false, false},
    {"nf4 tile 64 (packed)", QUANT_QTYPE_NF4, NULL, false, 64, false, false},
    {"int4 tile 32 mse (n=20, 21 candidates)", QUANT_QTYPE_INT4, "mse", false, 32, false, false},
    {"int8 per-channel mse (n=20)", QUANT_QTYPE_INT8, "mse", false, 0, false, false},
    {"int8 minmax per-channel (zero point)", QUANT_QTYPE_INT8, "minmax", false, 0, false, false},
    {"int4 minmax tile 32 (zero point)", QUANT_QTYPE_INT4, "minmax", false, 32, false, false},
    {"bf16 input -> int8 per-channel", QUANT_QTYPE_INT8, NULL, false, 0, true, false},
    {"bf16 input -> int8 tile 32", QUANT_QTYPE_INT8, NULL, false, 32, true, false},
    {"mxfp8 (tile 32)", QUANT_QTYPE_MXFP8, NULL, false, 32, false, false},
    {"mxfp4 (tile 32, packed)", QUANT_QTYPE_MXFP4, NULL, false, 32, false, false},
    {"nvfp4 (tile 16, packed), global scale given", QUANT_QTYPE_NVFP4, NULL, true, 16, false,
     false},
    {"nvfp4, global scale derived (2 passes)", QUANT_QTYPE_NVFP4, NULL, false, 16, false, false},
    {"dequantize int8 per-channel (GB/s of f32 output)", QUANT_QTYPE_INT8, NULL, false, 0, false,
     true},
};

#define N_KERNEL_CASES (sizeof kernel_cases / sizeof kernel_cases[0])
_Static_assert(N_KERNEL_CASES + 2 <= MAX_ROWS_SHOWN, "the table holds the two baselines too");

/* Channel axis 0 (one scale per row), optionally tiled along axis 1. `global` is the nvfp4
 * global scale of the tensor, used when the case gives it. */
static void how_for_case(const kernel_case *kc, float global, quant_how *how)
{
    quant_how_init(how, kc->qtype);
    if (kc->given_global) how->global_scale = global;
    how->n_channel_axes = 1;
    how->channel_axes[0] = 0;
    how->calibration = kc->calibration;
    if (kc->tile > 0) {
        how->n_tiles = 1;
        how->tiles[0] = (quant_tile){.axis = 1, .size = kc->tile, .fraction = 0.0};
    }
}

static bool how_is_asymmetric(const quant_how *how)
{
    quant_calib_method method;
    return quant_calib_parse(how->calibration, &method, NULL) == QUANT_OK && method.asymmetric;
}

/* ---- the whole run's state ------------------------------------------------------------------- */

typedef struct bench {
    int64_t rows, cols, numel;
    int reps;
    float *x;         /* the input tensor, f32 */
    uint16_t *x_bf16; /* the same values as BF16 */
    float *out;       /* memcpy destination and dequantize output */
    void *q;          /* codes, sized for the largest case */
    float *scale;     /* scales, sized for the largest case */
    int32_t *zp;      /* zero points, same count */
    size_t q_bytes, scale_count;
    quant_tensor x_f32_view, x_bf16_view, out_view;
    quant_ctx *ctx[COLUMNS];
    int threads[COLUMNS];
    bool use_avx2;      /* read-only baseline with AVX2 */
    float nvfp4_global; /* quant_nvfp4_global_scale of the tensor's max |x| */
    long llc_bytes;     /* the last-level cache size found (0: none) */
    const char *size_rule;
} bench;

typedef struct bench_row {
    char label[LABEL_MAX];
    double gbps[COLUMNS];
} bench_row;

typedef struct bench_table {
    bench_row rows[MAX_ROWS_SHOWN];
    int n;
    bool mismatch; /* some kernel gave different bits with all threads than with one */
} bench_table;

static int report_quant_error(const char *call, const char *what, int threads,
                              const quant_error *err)
{
    fprintf(stderr, "quant-bench: %s (%s, %d thread%s) failed: %s: %s\n", call, what, threads,
            threads == 1 ? "" : "s", quant_status_str(err->status), err->message);
    return -1;
}

/* ---- configuration --------------------------------------------------------------------------- */

/* Reads a positive integer from the environment, or `fallback` when the variable is unset. */
/* QUANT_BENCH_ONLY: '|'-separated texts, a label is timed when it holds one of them. */
static bool label_selected(const char *label, const char *only)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", only);
    for (char *save = NULL, *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save))
        if (strstr(label, t)) return true;
    return false;
}

static int env_positive(const char *name, long fallback, long max, long *value)
{
    const char *text = getenv(name);
    *value = fallback;
    if (!text || !*text) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 1 || v > max) {
        fprintf(stderr, "quant-bench: %s=\"%s\" must be an integer in 1..%ld\n", name, text, max);
        return -1;
    }
    *value = v;
    return 0;
}

/* The last-level cache in bytes: sysconf when it knows, else the largest cache of cpu0 in sysfs,
 * else 0. */
static long llc_bytes(void)
{
    long best = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    best = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (best > 0) return best;
    best = 0;
#endif
    for (int i = 0; i < 8; i++) {
        char path[80], text[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char *got = fgets(text, sizeof text, f);
        fclose(f);
        if (!got) continue;
        char *end = NULL;
        long v = strtol(text, &end, 10);
        if (end && (*end == 'K' || *end == 'k')) v <<= 10;
        if (end && (*end == 'M' || *end == 'm')) v <<= 20;
        best = v > best ? v : best;
    }
    return best;
}

/* Rows of DEFAULT_COLS f32 for at least LLC_FACTOR x LLC, at most 1/RAM_FRACTION of the RAM. */
static long default_rows(bench *b)
{
    long row_bytes = DEFAULT_COLS * (long)sizeof(float);
    b->llc_bytes = llc_bytes();
    long want = b->llc_bytes > 0 ? LLC_FACTOR * b->llc_bytes : FALLBACK_LLC;
    b->size_rule = b->llc_bytes > 0 ? "2 x LLC" : "no LLC size found: 64 MiB";
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && want > pages / RAM_FRACTION * page) {
        want = pages / RAM_FRACTION * page;
        b->size_rule = "capped at RAM / 4";
    }
    long rows = (want + row_bytes - 1) / row_bytes;
    return rows < 1 ? 1 : rows;
}

static int bench_configure(bench *b)
{
    long rows, cols, reps, mib;
    if (env_positive("QUANT_BENCH_MIB", 0, 1L << 20, &mib) != 0) return -1;
    long fallback_rows = default_rows(b);
    if (mib > 0) {
        fallback_rows = (mib << 20) / (DEFAULT_COLS * (long)sizeof(float));
        fallback_rows = fallback_rows < 1 ? 1 : fallback_rows;
        b->size_rule = "QUANT_BENCH_MIB";
    }
    if (env_positive("QUANT_BENCH_ROWS", fallback_rows, 1L << 20, &rows) != 0 ||
        env_positive("QUANT_BENCH_COLS", DEFAULT_COLS, 1L << 20, &cols) != 0 ||
        env_positive("QUANT_BENCH_REPS", DEFAULT_REPS, 1000, &reps) != 0)
        return -1;
    if (getenv("QUANT_BENCH_ROWS") || getenv("QUANT_BENCH_COLS"))
        b->size_rule = "QUANT_BENCH_ROWS/COLS";
    if (cols % LARGEST_TILE != 0) {
        fprintf(stderr, "quant-bench: QUANT_BENCH_COLS=%ld must be a multiple of %d (tile sizes)\n",
                cols, LARGEST_TILE);
        return -1;
    }
    b->rows = rows;
    b->cols = cols;
    b->numel = (int64_t)rows * cols;
    b->reps = (int)reps;
    return 0;
}

/* ---- buffers --------------------------------------------------------------------------------- */

static void *alloc_touched(size_t bytes)
{
    size_t rounded = (bytes + BUFFER_ALIGN - 1) / BUFFER_ALIGN * BUFFER_ALIGN;
    void *p = aligned_alloc(BUFFER_ALIGN, rounded ? rounded : BUFFER_ALIGN);
    if (p) memset(p, 0, rounded); /* fault every page in before timing */
    return p;
}

/* The largest code and scale buffers any kernel case needs. */
static int size_for_cases(bench *b)
{
    int64_t shape[2] = {b->rows, b->cols}, scale_shape[2];
    quant_error err;
    for (size_t i = 0; i < N_KERNEL_CASES; i++) {
        quant_how how;
        how_for_case(&kernel_cases[i], 1.0f, &how);
        if (quant_scale_shape(&how, 2, shape, scale_shape, &err) != QUANT_OK)
            return report_quant_error("quant_scale_shape", kernel_cases[i].label, 1, &err);
        int64_t q_bytes = quant_qvalue_bytes(&how, 2, shape);
        int64_t scale_count = quant_numel(2, scale_shape);
        if (q_bytes < 0 || scale_count < 0) {
            fprintf(stderr, "quant-bench: quant_qvalue_bytes (%s) failed\n", kernel_cases[i].label);
            return -1;
        }
        if ((size_t)q_bytes > b->q_bytes) b->q_bytes = (size_t)q_bytes;
        if ((size_t)scale_count > b->scale_count) b->scale_count = (size_t)scale_count;
    }
    return 0;
}

static int bench_alloc(bench *b)
{
    if (size_for_cases(b) != 0) return -1;
    size_t n = (size_t)b->numel;
    b->x = alloc_touched(n * sizeof *b->x);
    b->x_bf16 = alloc_touched(n * sizeof *b->x_bf16);
    b->out = alloc_touched(n * sizeof *b->out);
    b->q = alloc_touched(b->q_bytes);
    b->scale = alloc_touched(b->scale_count * sizeof *b->scale);
    b->zp = alloc_touched(b->scale_count * sizeof *b->zp);
    if (!b->x || !b->x_bf16 || !b->out || !b->q || !b->scale || !b->zp) {
        fprintf(stderr, "quant-bench: cannot allocate buffers for %lld x %lld\n",
                (long long)b->rows, (long long)b->cols);
        return -1;
    }
    return 0;
}

static void bench_free(bench *b)
{
    for (int c = 0; c < COLUMNS; c++) quant_ctx_free(b->ctx[c]);
    free(b->x);
    free(b->x_bf16);
    free(b->out);
    free(b->q);
    free(b->scale);
    free(b->zp);
}

/* ---- deterministic input --------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-0.5, 0.5). */
static double uniform_centered(uint64_t *state)
{
    return (double)(splitmix64(state) >> 11) * 0x1p-53 - 0.5;
}

/* Sum of 4 centered uniforms (variance 1/3) scaled to unit variance: normal-ish, |x| < 3.47. */
static float normalish(uint64_t *state)
{
    double sum = 0.0;
    for (int k = 0; k < 4; k++) sum += uniform_centered(state);
    return (float)(sum * sqrt(3.0));
}

static float max_abs_plain(const float *x, size_t n)
{
    float best = 0.0f;
    for (size_t i = 0; i < n; i++) best = fabsf(x[i]) > best ? fabsf(x[i]) : best;
    return best;
}

static int bench_fill(bench *b)
{
    uint64_t state = 0x5eed;
    for (int64_t i = 0; i < b->numel; i++) b->x[i] = normalish(&state);
    quant_error err;
    if (quant_convert(QUANT_DTYPE_F32, b->x, QUANT_DTYPE_BF16, b->x_bf16, b->numel, &err) !=
        QUANT_OK)
        return report_quant_error("quant_convert", "F32 -> BF16", 1, &err);
    b->nvfp4_global = quant_nvfp4_global_scale(max_abs_plain(b->x, (size_t)b->numel));
    int64_t shape[2] = {b->rows, b->cols};
    if (quant_tensor_init(&b->x_f32_view, QUANT_DTYPE_F32, 2, shape, b->x, &err) != QUANT_OK ||
        quant_tensor_init(&b->x_bf16_view, QUANT_DTYPE_BF16, 2, shape, b->x_bf16, &err) !=
            QUANT_OK ||
        quant_tensor_init(&b->out_view, QUANT_DTYPE_F32, 2, shape, b->out, &err) != QUANT_OK)
        return report_quant_error("quant_tensor_init", "bench tensors", 1, &err);
    return 0;
}

/* ---- contexts -------------------------------------------------------------------------------- */

static int bench_contexts(bench *b)
{
    const int requested[COLUMNS] = {1, 0}; /* 0 = online CPUs */
    for (int c = 0; c < COLUMNS; c++) {
        quant_ctx_options opts = {.threads = requested[c], .isa = QUANT_ISA_AUTO};
        quant_error err;
        b->ctx[c] = quant_ctx_new(&opts, &err);
        if (!b->ctx[c]) return report_quant_error("quant_ctx_new", "ISA auto", requested[c], &err);
        b->threads[c] = quant_ctx_threads(b->ctx[c]);
    }
    b->use_avx2 = quant_isa_supported(QUANT_ISA_AVX2);
    return 0;
}

/* ---- timing ---------------------------------------------------------------------------------- */

typedef int (*bench_fn)(void *arg); /* 0 on success; prints its own error otherwise */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One warm-up run, then the fastest of `reps` timed runs. */
static int best_seconds(bench_fn fn, void *arg, int reps, double *best)
{
    if (fn(arg) != 0) return -1;
    *best = HUGE_VAL;
    for (int r = 0; r < reps; r++) {
        double start = now_seconds();
        if (fn(arg) != 0) return -1;
        double elapsed = now_seconds() - start;
        if (elapsed < *best) *best = elapsed;
    }
    return 0;
}

static double gb_per_second(double bytes, double seconds)
{
    return seconds > 0.0 ? bytes / seconds * 1e-9 : 0.0;
}

/* ---- baselines: read-only max|x| and memcpy, split across pthreads --------------------------- */

static float max_abs_scalar(const float *x, size_t n)
{
    float best = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        best = a > best ? a : best;
    }
    return best;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static float max_abs_avx2(const float *x, size_t n)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_ps(m0, _mm256_and_ps(abs_mask, _mm256_loadu_ps(x + i)));
        m1 = _mm256_max_ps(m1, _mm256_and_ps(abs_mask, _mm256_loadu_ps(x + i + 8)));
        m2 = _mm256_max_ps(m2, _mm256_and_ps(abs_mask, _mm256_loadu_ps(x + i + 16)));
        m3 = _mm256_max_ps(m3, _mm256_and_ps(abs_mask, _mm256_loadu_ps(x + i + 24)));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    float best = max_abs_scalar(x + i, n - i);
    for (int k = 0; k < 8; k++) best = lanes[k] > best ? lanes[k] : best;
    return best;
}
#endif

static float max_abs(const float *x, size_t n, bool use_avx2)
{
#if defined(__x86_64__)
    if (use_avx2) return max_abs_avx2(x, n);
#else
    (void)use_avx2;
#endif
    return max_abs_scalar(x, n);
}

typedef struct slice_job {
    const float *src;
    float *dst;
    size_t n;
    bool use_avx2;
    float max_abs;
} slice_job;

static void *max_abs_slice(void *arg)
{
    slice_job *job = arg;
    job->max_abs = max_abs(job->src, job->n, job->use_avx2);
    return NULL;
}

static void *memcpy_slice(void *arg)
{
    slice_job *job = arg;
    memcpy(job->dst, job->src, job->n * sizeof *job->src);
    return NULL;
}

typedef struct split_run {
    void *(*fn)(void *);
    slice_job jobs[QUANT_MAX_THREADS];
    int threads;
} split_run;

/* Contiguous slices of whole cache lines, one per thread. */
static void split_init(split_run *run, const bench *b, int threads, void *(*fn)(void *))
{
    const size_t line = BUFFER_ALIGN / sizeof(float), n = (size_t)b->numel;
    size_t per = ((n + (size_t)threads - 1) / (size_t)threads + line - 1) / line * line;
    run->fn = fn;
    run->threads = threads;
    for (int t = 0; t < threads; t++) {
        size_t begin = (size_t)t * per < n ? (size_t)t * per : n;
        size_t end = begin + per < n ? begin + per : n;
        run->jobs[t] = (slice_job){b->x + begin, b->out + begin, end - begin, b->use_avx2, 0.0f};
    }
}

/* The calling thread runs slice 0 (as the library's pool does); threads are started per run. */
static int split_call(void *arg)
{
    split_run *run = arg;
    pthread_t tids[QUANT_MAX_THREADS];
    int started = 1, rc = 0;
    for (; started < run->threads; started++) {
        rc = pthread_create(&tids[started], NULL, run->fn, &run->jobs[started]);
        if (rc != 0) break;
    }
    run->fn(&run->jobs[0]);
    for (int t = 1; t < started; t++) pthread_join(tids[t], NULL);
    if (rc != 0) fprintf(stderr, "quant-bench: pthread_create failed: %s\n", strerror(rc));
    return rc != 0 ? -1 : 0;
}

static float split_max_abs(const split_run *run)
{
    float best = 0.0f;
    for (int t = 0; t < run->threads; t++)
        best = run->jobs[t].max_abs > best ? run->jobs[t].max_abs : best;
    return best;
}

static int measure_read_only(const bench *b, bench_row *row, float max_abs_seen[COLUMNS])
{
    split_run *run = malloc(sizeof *run);
    if (!run) {
        fprintf(stderr, "quant-bench: out of memory\n");
        return -1;
    }
    int rc = 0;
    for (int c = 0; c < COLUMNS && rc == 0; c++) {
        split_init(run, b, c == 0 ? 1 : b->threads[c], max_abs_slice);
        double seconds = 0.0;
        rc = best_seconds(split_call, run, b->reps, &seconds);
        row->gbps[c] = gb_per_second((double)b->numel * sizeof(float), seconds);
        max_abs_seen[c] = split_max_abs(run);
    }
    snprintf(row->label, sizeof row->label, "read-only max abs(x) (%s, baseline)",
             b->use_avx2 ? "avx2" : "scalar");
    free(run);
    return rc;
}

static int measure_memcpy(const bench *b, bench_row *row)
{
    split_run *run = malloc(sizeof *run);
    if (!run) {
        fprintf(stderr, "quant-bench: out of memory\n");
        return -1;
    }
    int rc = 0;
    for (int c = 0; c < COLUMNS && rc == 0; c++) {
        split_init(run, b, c == 0 ? 1 : b->threads[c], memcpy_slice);
        double seconds = 0.0;
        rc = best_seconds(split_call, run, b->reps, &seconds);
        row->gbps[c] = gb_per_second((double)b->numel * sizeof(float), seconds);
    }
    snprintf(row->label, sizeof row->label, "memcpy f32 -> f32 (GB/s of bytes copied)");
    free(run);
    return rc;
}

/* ---- kernels --------------------------------------------------------------------------------- */

typedef struct kernel_call {
    bench *b;
    const kernel_case *kc;
    quant_how how;
    quant_ctx *ctx;
    int threads;
    const quant_tensor *input;
    int32_t *zp; /* NULL for symmetric calibrations */
} kernel_call;

static int call_quantize(void *arg)
{
    kernel_call *k = arg;
    quant_error err;
    if (quant_quantize(k->ctx, &k->how, k->input, k->b->q, k->b->scale, k->zp, &err) != QUANT_OK)
        return report_quant_error("quant_quantize", k->kc->label, k->threads, &err);
    return 0;
}

static int call_dequantize(void *arg)
{
    kernel_call *k = arg;
    quant_error err;
    if (quant_dequantize(k->ctx, &k->how, k->b->q, k->b->scale, k->zp, &k->b->out_view, &err) !=
        QUANT_OK)
        return report_quant_error("quant_dequantize", k->kc->label, k->threads, &err);
    return 0;
}

/* FNV-1a over 64-bit words (and the tail bytes): enough to tell two outputs apart. */
static uint64_t hash_bytes(const void *data, size_t bytes, uint64_t h)
{
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* What the timed call produced, to compare one thread with all threads. */
static uint64_t kernel_output_hash(const kernel_call *k)
{
    int64_t shape[2] = {k->b->rows, k->b->cols}, scale_shape[2];
    if (k->kc->dequantize)
        return hash_bytes(k->b->out, (size_t)k->b->numel * sizeof(float), 0xcbf29ce484222325ull);
    if (quant_scale_shape(&k->how, 2, shape, scale_shape, NULL) != QUANT_OK) return 0;
    int64_t q_bytes = quant_qvalue_bytes(&k->how, 2, shape);
    if (q_bytes < 0) return 0;
    size_t scale_count = (size_t)quant_numel(2, scale_shape);
    uint64_t h = hash_bytes(k->b->q, (size_t)q_bytes, 0xcbf29ce484222325ull);
    h = hash_bytes(k->b->scale, scale_count * sizeof(float), h);
    return k->zp ? hash_bytes(k->zp, scale_count * sizeof(int32_t), h) : h;
}

static void kernel_call_init(kernel_call *k, bench *b, const kernel_case *kc, int column)
{
    memset(k, 0, sizeof *k);
    k->b = b;
    k->kc = kc;
    how_for_case(kc, b->nvfp4_global, &k->how);
    k->ctx = b->ctx[column];
    k->threads = b->threads[column];
    k->input = kc->bf16_input ? &b->x_bf16_view : &b->x_f32_view;
    k->zp = how_is_asymmetric(&k->how) ? b->zp : NULL;
}

/* Times one kernel in one column; returns GB/s (input bytes, or f32 output bytes). */
static int measure_kernel_column(bench *b, const kernel_case *kc, int column, double *gbps,
                                 uint64_t *hash)
{
    kernel_call k;
    kernel_call_init(&k, b, kc, column);
    if (kc->dequantize && call_quantize(&k) != 0) return -1; /* the codes, untimed */
    double seconds = 0.0;
    if (best_seconds(kc->dequantize ? call_dequantize : call_quantize, &k, b->reps, &seconds) != 0)
        return -1;
    size_t elem = kc->dequantize ? sizeof(float) : quant_dtype_size(k.input->dtype);
    *gbps = gb_per_second((double)b->numel * (double)elem, seconds);
    *hash = kernel_output_hash(&k);
    return 0;
}

static int measure_kernel(bench *b, const kernel_case *kc, bench_row *row, bool *mismatch)
{
    uint64_t hash[COLUMNS];
    snprintf(row->label, sizeof row->label, "%s", kc->label);
    for (int c = 0; c < COLUMNS; c++)
        if (measure_kernel_column(b, kc, c, &row->gbps[c], &hash[c]) != 0) return -1;
    if (hash[0] != hash[1]) {
        fprintf(stderr, "quant-bench: %s: %d threads gave different bits than 1 thread\n",
                kc->label, b->threads[1]);
        *mismatch = true;
    }
    return 0;
}

/* ---- output ---------------------------------------------------------------------------------- */

static void print_header(const bench *b)
{
    const char *env_isa = getenv("QUANT_ISA");
    unsigned v = quant_version_number();
    printf("quant-bench: libquant %u.%u.%u, ISA %s (QUANT_ISA=%s), 1 thread and N = %d threads "
           "(online CPUs)\n",
           v / 10000, v / 100 % 100, v % 100, quant_isa_name(quant_ctx_isa(b->ctx[0])),
           env_isa && *env_isa ? env_isa : "unset", b->threads[1]);
    printf("tensor: %lld x %lld f32 (%.1f MiB; last-level cache %.1f MiB; size rule: %s), "
           "normal-ish (sum of 4 uniforms); best of %d run%s after 1 warm-up\n",
           (long long)b->rows, (long long)b->cols,
           (double)b->numel * sizeof(float) / (1024.0 * 1024.0),
           (double)b->llc_bytes / (1024.0 * 1024.0), b->size_rule, b->reps,
           b->reps == 1 ? "" : "s");
    printf("read-only baseline: the best of a pass before and one after the kernels\n");
    printf("GB/s = 1e9 bytes of kernel input per second; ratio = GB/s / read-only pass GB/s at "
           "the same thread count\n\n");
}

static void print_table(const bench_table *t, const bench_row *read_only)
{
    printf("| %-48s | %13s | %23s | %13s | %23s | %14s |\n", "kernel", "1-thread GB/s",
           "ratio vs read-only (1T)", "N-thread GB/s", "ratio vs read-only (NT)", "NT/1T speed-up");
    printf("|:%s|%s:|%s:|%s:|%s:|%s:|\n", "-------------------------------------------------",
           "--------------", "------------------------", "--------------",
           "------------------------", "---------------");
    for (int i = 0; i < t->n; i++) {
        const bench_row *r = &t->rows[i];
        printf("| %-48s | %13.2f | %23.2f | %13.2f | %23.2f | %13.2fx |\n", r->label, r->gbps[0],
               r->gbps[0] / read_only->gbps[0], r->gbps[1], r->gbps[1] / read_only->gbps[1],
               r->gbps[1] / r->gbps[0]);
    }
}

/* ---- main ------------------------------------------------------------------------------------ */

static int measure_all(bench *b, bench_table *t)
{
    float max_abs_seen[COLUMNS];
    if (measure_read_only(b, &t->rows[t->n++], max_abs_seen) != 0) return -1;
    if (max_abs_seen[0] != max_abs_seen[1] ||
        max_abs_seen[0] != max_abs_scalar(b->x, (size_t)b->numel)) {
        fprintf(stderr, "quant-bench: the read-only pass found different maxima (%g, %g)\n",
                (double)max_abs_seen[0], (double)max_abs_seen[1]);
        return -1;
    }
    if (measure_memcpy(b, &t->rows[t->n++]) != 0) return -1;
    const char *only = getenv("QUANT_BENCH_ONLY");
    for (size_t i = 0; i < N_KERNEL_CASES; i++) {
        if (only && !label_selected(kernel_cases[i].label, only)) continue;
        if (measure_kernel(b, &kernel_cases[i], &t->rows[t->n++], &t->mismatch) != 0) return -1;
    }
    bench_row again; /* the machine is shared: the baseline's best of before and after */
    if (measure_read_only(b, &again, max_abs_seen) != 0) return -1;
    for (int c = 0; c < COLUMNS; c++)
        if (again.gbps[c] > t->rows[0].gbps[c]) t->rows[0].gbps[c] = again.gbps[c];
    return 0;
}

int main(void)
{
    bench b;
    bench_table table;
    memset(&b, 0, sizeof b);
    memset(&table, 0, sizeof table);
    int rc = bench_configure(&b);
    if (rc == 0) rc = bench_contexts(&b);
    if (rc == 0) rc = bench_alloc(&b);
    if (rc == 0) rc = bench_fill(&b);
    if (rc == 0) rc = measure_all(&b, &table);
    if (rc == 0) {
        print_header(&b);
        print_table(&table, &table.rows[0]);
    }
    bench_free(&b);
    return rc == 0 && !table.mismatch ? 0 : 1;
}
