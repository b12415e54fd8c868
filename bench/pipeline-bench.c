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
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "quant_st.h"

#define TENSOR_COLS       8192 /* rows x 8192 bf16: 64 MiB per tensor at 4096 rows */
#define TENSORS_PER_SHARD 8
static int64_t tensor_rows = 4096; /* fewer for checkpoints under 512 MiB (CI's smoke run) */
#define TENSOR_BYTES ((size_t)tensor_rows * TENSOR_COLS * 2)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "pipeline-bench: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Roughly normal bf16 weights, different per tensor. */
static void fill_bf16(uint16_t *x, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        float v = ((float)(s & 0xffff) + (float)((s >> 16) & 0xffff) + (float)((s >> 32) & 0xffff) -
                   98302.5f) /
                  65536.0f;
        x[i] = quant_f32_to_bf16(v * 0.02f);
    }
}

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
    if (quant_st_writer_new(path, t, TENSORS_PER_SHARD, &key, &val, 1, &w, &err) != QUANT_CK_OK) {
        fprintf(stderr, "pipeline-bench: %s\n", err.message);
        exit(1);
    }
    for (int i = 0; i < TENSORS_PER_SHARD; i++) {
        fill_bf16(buf, TENSOR_BYTES / 2, (uint64_t)(shard * 100 + i));
        if (quant_st_writer_pwrite(w, (size_t)quant_st_writer_index(w, names[i]), 0, buf,
                                   TENSOR_BYTES, &err) != QUANT_CK_OK) {
            fprintf(stderr, "pipeline-bench: %s\n", err.message);
            exit(1);
        }
    }
    if (quant_st_writer_commit(w, &err) != QUANT_CK_OK) {
        fprintf(stderr, "pipeline-bench: %s\n", err.message);
        exit(1);
    }
    quant_st_writer_free(w);
}

/* Runs argv, returns wall seconds; *maxrss_kib gets the child's peak RSS. */
static double run(char *const argv[], long *maxrss_kib)
{
    sync(); /* the previous run's dirty pages are written back before, not during, this one */
    double t0 = now();
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) die("wait4");
    double t = now() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "pipeline-bench: %s failed (status %d)\n", argv[0], status);
        exit(1);
    }
    if (maxrss_kib) *maxrss_kib = ru.ru_maxrss;
    return t;
}

static void rm_rf(const char *path)
{
    char *argv[] = {"rm", "-rf", (char *)path, NULL};
    run(argv, NULL);
}

static void warm(const char *dir)
{
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cat '%s'/* > /dev/null", dir);
    if (system(cmd) != 0) die("warming the page cache");
}

int main(int argc, char **argv)
{
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
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char root[2048], in[4200], out[4200], cpout[4200], rules[4200], path[4400];
    snprintf(root, sizeof root, "%s/pipeline-bench-XXXXXX", tmp);
    if (!mkdtemp(root)) die("mkdtemp");
    snprintf(in, sizeof in, "%s/in", root);
    snprintf(out, sizeof out, "%s/out", root);
    snprintf(cpout, sizeof cpout, "%s/cp", root);
    snprintf(rules, sizeof rules, "%s/rules.json", root);
    if (mkdir(in, 0755) != 0) die("mkdir");
    uint16_t *buf = malloc(TENSOR_BYTES);
    if (!buf) die("malloc");
    for (int s = 0; s < shards; s++) {
        snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", in, s + 1, shards);
        write_shard(path, s, buf);
    }
    free(buf);
    FILE *f = fopen(rules, "w");
    if (!f || fputs("[{\"module_path\": \".*\", \"weight_qtype\": \"int8\"}]\n", f) < 0 ||
        fclose(f) != 0)
        die("rules");
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
    rm_rf(root);
    return 0;
}
