/* pipeline-bench.c -- `quant quantize` throughput on a generated bf16 checkpoint (int8
 * per-channel), beside `cp -r` of the same files in the same run (both from the page cache), and
 * the quantizer's peak resident memory. Prints a Markdown table.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Usage: pipeline-bench QUANT_BINARY
 * Environment: QUANT_BENCH_PIPELINE_MIB (checkpoint size, default 2048), QUANT_BENCH_THREADS
 * (default 2), TMPDIR (where the checkpoint is generated; needs ~2.5x the size free).
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

/* Runs argv, returns wall seconds; *maxrss_kib gets the child's peak RSS. */
static double run(char *const argv[], long *maxrss_kib)
{
    sync(); /* the previous run's dirty pages are written back before, not during, this one */
    struct rusage ru;
    double t0 = bench_now();
    int status = bench_spawn_wait(argv, &ru);
    double t = bench_now() - t0;
    if (status < 0) bench_die(argv[0]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        bench_fail("%s failed (status %d)", argv[0], status);
    if (maxrss_kib) *maxrss_kib = ru.ru_maxrss;
    return t;
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

int main(int argc, char **argv)
{
    bench_init("pipeline-bench");
    if (argc != 2) {
        fprintf(stderr, "usage: pipeline-bench QUANT_BINARY\n");
        return 2;
    }
    const char *env = getenv("QUANT_BENCH_PIPELINE_MIB");
    long mib = env ? atol(env) : 2048;
    const char *th = getenv("QUANT_BENCH_THREADS");
    int shards = (int)((mib + 511) / 512);
    if (shards < 1) shards = 1;
    if (mib < 512) tensor_rows = mib < 1 ? 8 : mib * 8; /* one shard of mib MiB */
    const char *root = bench_make_root();
    char in[4200], out[4200], cpout[4200], rules[4200], path[4400];
    snprintf(in, sizeof in, "%s/in", root);
    snprintf(out, sizeof out, "%s/out", root);
    snprintf(cpout, sizeof cpout, "%s/cp", root);
    snprintf(rules, sizeof rules, "%s/rules.json", root);
    if (mkdir(in, 0755) != 0) bench_die("mkdir");
    uint16_t *buf = malloc(TENSOR_BYTES);
    if (!buf) bench_die("malloc");
    for (int s = 0; s < shards; s++) {
        snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", in, s + 1, shards);
        write_shard(path, s, buf);
    }
    free(buf);
    const char *rules_json = "[{\"module_path\": \".*\", \"weight_qtype\": \"int8\"}]\n";
    if (kit_write_file(rules, rules_json, strlen(rules_json)) != 0) bench_die(rules);
    double gib = (double)shards * TENSORS_PER_SHARD * (double)TENSOR_BYTES / (1u << 30);
    warm(in);
    char *cp_argv[] = {"cp", "-r", in, cpout, NULL};
    double t_cp = 1e30;
    for (int rep = 0; rep < 2; rep++) { /* best of two */
        double t = run(cp_argv, NULL);
        t_cp = t < t_cp ? t : t_cp;
        rm_rf(cpout);
    }
    printf("## pipeline: quant quantize of %.2f GiB bf16 (%d shards, int8 per-channel), "
           "threads %s\n\n",
           gib, shards, th ? th : "2");
    printf("| run | GB/s | ratio vs cp | peak RSS MiB |\n|---|---|---|---|\n");
    printf("| cp -r (baseline) | %.2f | 1.00 | - |\n", gib * 1.073741824 / t_cp);
    const char *variants[2][2] = {{"quant quantize", NULL},
                                  {"quant quantize --no-quality", "--no-quality"}};
    for (int v = 0; v < 2; v++) {
        char *q_argv[12];
        int k = 0;
        q_argv[k++] = argv[1];
        q_argv[k++] = "quantize";
        q_argv[k++] = "--quiet";
        q_argv[k++] = "--threads";
        q_argv[k++] = (char *)(th ? th : "2");
        q_argv[k++] = "--rules";
        q_argv[k++] = rules;
        if (variants[v][1]) q_argv[k++] = (char *)variants[v][1];
        q_argv[k++] = in;
        q_argv[k++] = out;
        q_argv[k] = NULL;
        long rss = 0;
        double t = 1e30;
        for (int rep = 0; rep < 2; rep++) { /* best of two, like the baseline */
            long r;
            double dt = run(q_argv, &r);
            rm_rf(out);
            t = dt < t ? dt : t;
            rss = r > rss ? r : rss;
        }
        printf("| %s | %.2f | %.2f | %.0f |\n", variants[v][0], gib * 1.073741824 / t, t_cp / t,
               (double)rss / 1024.0);
    }
    bench_cleanup();
    return 0;
}
