/* pipeline-bench.c -- `quant quantize` throughput on a generated bf16 checkpoint (int8
 * per-channel, and int4 in tiles of 128 columns), with and without the quality measurement,
 * beside `cp -r` of the same files in the same run (all from the page cache), with the CPU time
 * (user + system) of each, its minor page faults and the quantizer's peak resident memory. The
 * runs are interleaved (cp, then each variant, repeated) and each figure is the best of its
 * repetitions, so a slow spell of the shared machine hits them all alike. The variants' order is
 * shuffled each round (a fixed permutation per round, the same from one bench run to the next):
 * how fast a run gets fresh page-cache pages on this VM depends on what ran just before it (cp's
 * removed copy, or a run that wrote half its bytes), so a fixed order made the same variant pay for
 * it every round (BENCHMARKS.md). Prints a Markdown table and the load average before
 * and after.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Usage: pipeline-bench QUANT_BINARY [BASELINE_QUANT_BINARY]
 *   (a second binary, e.g. the previous build, is timed the same way in the same rounds)
 * Environment: QUANT_BENCH_PIPELINE_MIB (checkpoint size, default 2048), QUANT_BENCH_THREADS
 * (default 2), QUANT_BENCH_REPS (rounds, default 4), TMPDIR (where the checkpoint is generated;
 * needs ~2.5x the size free).
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "kit.h"
#include "quant_st.h"

#define TENSOR_COLS       8192 /* rows x 8192 bf16: 64 MiB per tensor at 4096 rows */
#define TENSORS_PER_SHARD 8
static int64_t tensor_rows = 4096; /* fewer for checkpoints under 512 MiB (CI's smoke run) */
#define TENSOR_BYTES ((size_t)tensor_rows * TENSOR_COLS * 2)

static void write_shard(const char *path, int shard, uint16_t *buf)
{
    quant_st_out_tensor t[TENSORS_PER_SHARD];
    char names[TENSORS_PER_SHARD][64];
    for (int i = 0; i < TENSORS_PER_SHARD; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.mlp.proj%d.weight", shard, i);
        t[i] = (quant_st_out_tensor){.name = names[i],
                                     .dtype = QUANT_ST_BF16,
                                     .rank = 2,
                                     .shape = {tensor_rows, TENSOR_COLS}};
    }
    const char *key = "format", *val = "pt";
    quant_st_writer *w;
    quant_ck_error err;
    if (quant_st_writer_new(path, t, TENSORS_PER_SHARD, &key, &val, 1, &w, &err) != QUANT_CK_OK)
        bench_fail("%s", err.message);
    for (int i = 0; i < TENSORS_PER_SHARD; i++) {
        bench_fill_bf16(buf, TENSOR_BYTES / 2, (uint64_t)(shard * 100 + i), quant_f32_to_bf16);
        if (quant_st_writer_pwrite(w, (size_t)quant_st_writer_index(w, names[i]), 0, buf,
                                   TENSOR_BYTES, &err) != QUANT_CK_OK)
            bench_fail("%s", err.message);
    }
    if (quant_st_writer_commit(w, &err) != QUANT_CK_OK) bench_fail("%s", err.message);
    quant_st_writer_free(w);
}

/* What one run of a child cost beside its wall time. */
typedef struct usage {
    long maxrss_kib; /* peak RSS */
    long minflt;     /* minor page faults */
    double cpu;      /* user + system seconds */
    double sys;      /* system seconds alone */
} usage;

/* Runs argv, returns wall seconds; *u (may be NULL) gets the child's resource usage. */
static double run(char *const argv[], usage *u)
{
    sync(); /* the previous run's dirty pages are written back before, not during, this one */
    struct rusage ru;
    double t0 = bench_now();
    int status = bench_spawn_wait(argv, &ru);
    double t = bench_now() - t0;
    if (status < 0) bench_die(argv[0]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        bench_fail("%s failed (status %d)", argv[0], status);
    if (u) {
        u->maxrss_kib = ru.ru_maxrss;
        u->minflt = ru.ru_minflt;
        u->sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
        u->cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + u->sys;
    }
    return t;
}

/* order[0..n) = a permutation of 0..n-1 drawn from seed (Fisher-Yates, xorshift64). */
static void shuffle(int *order, int n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        int j = (int)(s % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static void rm_rf(const char *path)
{
    if (kit_rmtree(path) != 0) bench_die(path);
}

static void warm(const char *dir)
{
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cat '%s'/* > /dev/null", dir);
    if (system(cmd) != 0) bench_die("warming the page cache");
}

/* One timed configuration: a binary, a rule file, quality on or off. */
typedef struct variant {
    const char *label, *bin, *rules;
    bool no_quality;
    double best, best_cpu; /* wall and CPU (user + system) seconds, each the least seen */
    double best_sys;       /* the system part of the run with the least CPU */
    long rss_kib;          /* the most seen */
    long minflt;           /* the fewest minor faults seen */
} variant;

static double run_variant(variant *v, const char *threads, const char *in, const char *out)
{
    char *q_argv[12];
    int k = 0;
    q_argv[k++] = (char *)v->bin;
    q_argv[k++] = "quantize";
    q_argv[k++] = "--quiet";
    q_argv[k++] = "--threads";
    q_argv[k++] = (char *)threads;
    q_argv[k++] = "--rules";
    q_argv[k++] = (char *)v->rules;
    if (v->no_quality) q_argv[k++] = "--no-quality";
    q_argv[k++] = (char *)in;
    q_argv[k++] = (char *)out;
    q_argv[k] = NULL;
    usage u;
    double t = run(q_argv, &u);
    rm_rf(out);
    v->best = t < v->best ? t : v->best;
    if (u.cpu < v->best_cpu) {
        v->best_cpu = u.cpu;
        v->best_sys = u.sys;
    }
    v->rss_kib = u.maxrss_kib > v->rss_kib ? u.maxrss_kib : v->rss_kib;
    v->minflt = v->minflt < 0 || u.minflt < v->minflt ? u.minflt : v->minflt;
    return t;
}

int main(int argc, char **argv)
{
    bench_init("pipeline-bench");
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: pipeline-bench QUANT_BINARY [BASELINE_QUANT_BINARY]\n");
        return 2;
    }
    const char *env = getenv("QUANT_BENCH_PIPELINE_MIB");
    long mib = env ? atol(env) : 2048;
    const char *th = getenv("QUANT_BENCH_THREADS");
    const char *threads = th ? th : "2";
    const char *reps_env = getenv("QUANT_BENCH_REPS");
    int reps = reps_env ? atoi(reps_env) : 4;
    if (reps < 1) reps = 1;
    int shards = (int)((mib + 511) / 512);
    if (shards < 1) shards = 1;
    if (mib < 512) tensor_rows = mib < 1 ? 8 : mib * 8; /* one shard of mib MiB */
    const char *root = bench_make_root();
    char in[4200], out[4200], cpout[4200], rules8[4200], rules4[4200], path[4400];
    snprintf(in, sizeof in, "%s/in", root);
    snprintf(out, sizeof out, "%s/out", root);
    snprintf(cpout, sizeof cpout, "%s/cp", root);
    snprintf(rules8, sizeof rules8, "%s/int8.json", root);
    snprintf(rules4, sizeof rules4, "%s/int4.json", root);
    if (mkdir(in, 0755) != 0) bench_die("mkdir");
    uint16_t *buf = malloc(TENSOR_BYTES);
    if (!buf) bench_die("malloc");
    for (int s = 0; s < shards; s++) {
        snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", in, s + 1, shards);
        write_shard(path, s, buf);
    }
    free(buf);
    const char *json8 = "[{\"module_path\": \".*\", \"weight_qtype\": \"int8\"}]\n";
    const char *json4 = "[{\"module_path\": \".*\", \"weight_qtype\": \"int4\", "
                        "\"tile_size\": 128}]\n";
    if (kit_write_file(rules8, json8, strlen(json8)) != 0) bench_die(rules8);
    if (kit_write_file(rules4, json4, strlen(json4)) != 0) bench_die(rules4);
    double gib = (double)shards * TENSORS_PER_SHARD * (double)TENSOR_BYTES / (1u << 30);
    warm(in);
    variant vs[8];
    int nv = 0;
    for (int b = 1; b < argc; b++) {
        const char *who = b == 1 ? "" : " (baseline binary)";
        static char labels[8][96];
        const char *names[4] = {"int8 per-channel", "int8 per-channel, --no-quality",
                                "int4 tile 128", "int4 tile 128, --no-quality"};
        for (int i = 0; i < 4; i++) {
            snprintf(labels[nv], sizeof labels[nv], "quant quantize, %s%s", names[i], who);
            vs[nv] = (variant){.label = labels[nv],
                               .bin = argv[b],
                               .rules = i < 2 ? rules8 : rules4,
                               .no_quality = i % 2 == 1,
                               .best = 1e30,
                               .best_cpu = 1e30,
                               .minflt = -1};
            nv++;
        }
    }
    char *cp_argv[] = {"cp", "-r", in, cpout, NULL};
    double t_cp = 1e30, cpu_cp = 1e30, sys_cp = 0;
    char load_before[32];
    snprintf(load_before, sizeof load_before, "%s", bench_load_avg());
    for (int rep = 0; rep < reps; rep++) {
        usage u;
        double t = run(cp_argv, &u);
        rm_rf(cpout);
        t_cp = t < t_cp ? t : t_cp;
        if (u.cpu < cpu_cp) {
            cpu_cp = u.cpu;
            sys_cp = u.sys;
        }
        int order[8];
        shuffle(order, nv, (uint64_t)rep);
        for (int i = 0; i < nv; i++) run_variant(&vs[order[i]], threads, in, out);
    }
    printf("## pipeline: quant quantize of %.2f GiB bf16 (%d shards), threads %s, best of %d "
           "interleaved rounds (order shuffled each round), load average %s before, %s after\n\n",
           gib, shards, threads, reps, load_before, bench_load_avg());
    printf("| run | GB/s | ratio vs cp | CPU s (of it system) | minor faults | peak RSS MiB |\n"
           "|---|---|---|---|---|---|\n");
    printf("| cp -r (baseline) | %.2f | 1.00 | %.2f (%.2f) | - | - |\n", gib * 1.073741824 / t_cp,
           cpu_cp, sys_cp);
    for (int i = 0; i < nv; i++)
        printf("| %s | %.2f | %.2f | %.2f (%.2f) | %ld | %.0f |\n", vs[i].label,
               gib * 1.073741824 / vs[i].best, t_cp / vs[i].best, vs[i].best_cpu, vs[i].best_sys,
               vs[i].minflt, (double)vs[i].rss_kib / 1024.0);
    bench_cleanup();
    return 0;
}
