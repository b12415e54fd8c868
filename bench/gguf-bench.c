/* gguf-bench.c -- `quant quantize --layout gguf` to Q4_K_M with importance, on a generated Llama
 * of BF16 weights (QUANT_BENCH_GGUF_MIB, default 1024), from the GGUF file and from the same
 * model as a Hugging Face directory (safetensors), beside llama.cpp's llama-quantize on the GGUF
 * with the same importance matrix and thread count, and beside `cat` (the read-only pass) and
 * `cp` of the GGUF, all in the same run from the page cache. Each figure is the best of
 * QUANT_BENCH_REPS rounds (default 2); peak RSS is the most seen. llama-quantize is
 * $LLAMA_QUANTIZE, else found on PATH; without it that row says so and the rest runs.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Usage: gguf-bench QUANT_BINARY
 * Environment: QUANT_BENCH_GGUF_MIB, QUANT_BENCH_THREADS (default 2), QUANT_BENCH_REPS,
 * LLAMA_QUANTIZE, TMPDIR (needs ~3.5x the size free).
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
#include "quant_gguf.h"
#include "quant_imatrix.h"
#include "quant_st.h"

#define PARTS 7 /* q k v o gate up down */

typedef struct dims {
    int64_t hidden, inter, layers, vocab;
} dims;

static const struct {
    const char *gguf, *hf;
    int in_hidden; /* the row length: hidden, or inter for down */
    int out_inter; /* rows: inter for gate/up, else hidden */
} parts[PARTS] = {
    {"attn_q", "self_attn.q_proj", 1, 0}, {"attn_k", "self_attn.k_proj", 1, 0},
    {"attn_v", "self_attn.v_proj", 1, 0}, {"attn_output", "self_attn.o_proj", 1, 0},
    {"ffn_gate", "mlp.gate_proj", 1, 1},  {"ffn_up", "mlp.up_proj", 1, 1},
    {"ffn_down", "mlp.down_proj", 0, 0},
};

/* The model's shape for about `mib` MiB of bf16 weights: rows of 2048 (4096 from 4 GiB up). */
static dims model_dims(long mib)
{
    dims d = {.hidden = mib >= 4096 ? 4096 : mib >= 64 ? 2048 : 256, .vocab = 512};
    d.inter = d.hidden * 11 / 4 / 256 * 256;
    int64_t per_layer = (4 * d.hidden * d.hidden + 3 * d.hidden * d.inter) * 2;
    d.layers = (int64_t)mib * (1 << 20) / per_layer;
    if (d.layers < 1) d.layers = 1;
    return d;
}

static void ne_of(const dims *d, int p, int64_t ne[2])
{
    ne[0] = parts[p].in_hidden ? d->hidden : d->inter;
    ne[1] = parts[p].out_inter ? d->inter : d->hidden;
}

static void check(quant_ck_status st, const quant_ck_error *err)
{
    if (st != QUANT_CK_OK) bench_fail("%s", err->message);
}

/* The GGUF input (llama's keys, a small tokenizer, bf16 weights, f32 norms). */
static void write_gguf(const char *path, const dims *d, uint16_t *buf)
{
    quant_gguf_writer *w;
    quant_ck_error err;
    check(quant_gguf_writer_new(path, &w, &err), &err);
    check(quant_gguf_writer_set_string(w, "general.architecture", "llama", &err), &err);
    const struct {
        const char *k;
        int64_t v;
    } u32s[] = {{"llama.context_length", 4096},     {"llama.embedding_length", d->hidden},
                {"llama.block_count", d->layers},   {"llama.feed_forward_length", d->inter},
                {"llama.attention.head_count", 16}, {"llama.attention.head_count_kv", 16}};
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++)
        check(quant_gguf_writer_set_u32(w, u32s[i].k, (uint32_t)u32s[i].v, &err), &err);
    check(quant_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f, &err),
          &err);
    check(quant_gguf_writer_set_string(w, "tokenizer.ggml.model", "llama", &err), &err);
    char **tokens = malloc((size_t)d->vocab * sizeof *tokens);
    for (int64_t i = 0; i < d->vocab; i++) {
        tokens[i] = malloc(16);
        snprintf(tokens[i], 16, "t%lld", (long long)i);
    }
    check(quant_gguf_writer_set_strings(w, "tokenizer.ggml.tokens", (const char *const *)tokens,
                                        (size_t)d->vocab, &err),
          &err);
    for (int64_t i = 0; i < d->vocab; i++) free(tokens[i]);
    free(tokens);
    int64_t emb[2] = {d->hidden, d->vocab}, norm[1] = {d->hidden};
    check(quant_gguf_writer_add_tensor(w, "token_embd.weight", 2, emb, QUANT_GGML_BF16, NULL, &err),
          &err);
    char name[64];
    for (int64_t l = 0; l < d->layers; l++) {
        snprintf(name, sizeof name, "blk.%lld.attn_norm.weight", (long long)l);
        check(quant_gguf_writer_add_tensor(w, name, 1, norm, QUANT_GGML_F32, NULL, &err), &err);
        for (int p = 0; p < PARTS; p++) {
            int64_t ne[2];
            ne_of(d, p, ne);
            snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)l, parts[p].gguf);
            check(quant_gguf_writer_add_tensor(w, name, 2, ne, QUANT_GGML_BF16, NULL, &err), &err);
        }
    }
    check(quant_gguf_writer_begin(w, &err), &err);
    bench_fill_bf16(buf, (size_t)(d->hidden * d->vocab), 1, quant_f32_to_bf16);
    check(quant_gguf_writer_write(w, buf, (size_t)(d->hidden * d->vocab) * 2, &err), &err);
    float *ones = malloc((size_t)d->hidden * sizeof *ones);
    for (int64_t i = 0; i < d->hidden; i++) ones[i] = 1.0f;
    for (int64_t l = 0; l < d->layers; l++) {
        check(quant_gguf_writer_write(w, ones, (size_t)d->hidden * 4, &err), &err);
        for (int p = 0; p < PARTS; p++) {
            int64_t ne[2];
            ne_of(d, p, ne);
            bench_fill_bf16(buf, (size_t)(ne[0] * ne[1]), (uint64_t)(l * 16 + p + 2),
                            quant_f32_to_bf16);
            check(quant_gguf_writer_write(w, buf, (size_t)(ne[0] * ne[1]) * 2, &err), &err);
        }
    }
    free(ones);
    check(quant_gguf_writer_commit(w, &err), &err);
    quant_gguf_writer_free(w);
}

/* The same model as a Hugging Face directory: config.json and one safetensors file. */
static void write_hf(const char *dir, const dims *d, uint16_t *buf)
{
    char path[4400], text[512];
    if (mkdir(dir, 0755) != 0) bench_die(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int n = snprintf(text, sizeof text,
                     "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %lld, "
                     "\"intermediate_size\": %lld, \"num_hidden_layers\": %lld, "
                     "\"num_attention_heads\": 16, \"vocab_size\": %lld, "
                     "\"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-05}\n",
                     (long long)d->hidden, (long long)d->inter, (long long)d->layers,
                     (long long)d->vocab);
    if (kit_write_file(path, text, (size_t)n) != 0) bench_die(path);
    size_t nt = 1 + (size_t)d->layers * (PARTS + 1), k = 0;
    quant_st_out_tensor *t = calloc(nt, sizeof *t);
    char(*names)[64] = calloc(nt, 64);
    snprintf(names[k], 64, "model.embed_tokens.weight");
    t[k] = (quant_st_out_tensor){names[k], QUANT_ST_BF16, 2, {d->vocab, d->hidden}};
    k++;
    for (int64_t l = 0; l < d->layers; l++) {
        snprintf(names[k], 64, "model.layers.%lld.input_layernorm.weight", (long long)l);
        t[k] = (quant_st_out_tensor){names[k], QUANT_ST_F32, 1, {d->hidden}};
        k++;
        for (int p = 0; p < PARTS; p++) {
            int64_t ne[2];
            ne_of(d, p, ne);
            snprintf(names[k], 64, "model.layers.%lld.%s.weight", (long long)l, parts[p].hf);
            t[k] = (quant_st_out_tensor){names[k], QUANT_ST_BF16, 2, {ne[1], ne[0]}};
            k++;
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    quant_st_writer *w;
    quant_ck_error err;
    check(quant_st_writer_new(path, t, nt, NULL, NULL, 0, &w, &err), &err);
    for (size_t i = 0; i < nt; i++) {
        uint64_t bytes = quant_st_writer_nbytes(w, i);
        if (t[i].dtype == QUANT_ST_F32) {
            for (size_t j = 0; j < bytes / 4; j++) ((float *)buf)[j] = 1.0f;
        } else {
            bench_fill_bf16(buf, bytes / 2, i + 1, quant_f32_to_bf16);
        }
        check(quant_st_writer_pwrite(w, i, 0, buf, bytes, &err), &err);
    }
    check(quant_st_writer_commit(w, &err), &err);
    quant_st_writer_free(w);
    free(t);
    free(names);
}

/* An importance matrix over every weight (positive, uneven columns). */
static void write_imatrix(const char *path, const dims *d)
{
    size_t n = (size_t)d->layers * PARTS, k = 0;
    quant_importance *e = calloc(n, sizeof *e);
    char(*mods)[64] = calloc(n, 64);
    float *wh = malloc((size_t)d->hidden * 4), *wi = malloc((size_t)d->inter * 4);
    for (int64_t i = 0; i < d->hidden; i++) wh[i] = 0.1f + (float)((i * 7919) % 97) / 10.0f;
    for (int64_t i = 0; i < d->inter; i++) wi[i] = 0.1f + (float)((i * 104729) % 89) / 10.0f;
    for (int64_t l = 0; l < d->layers; l++)
        for (int p = 0; p < PARTS; p++, k++) {
            snprintf(mods[k], 64, "blk.%lld.%s", (long long)l, parts[p].gguf);
            e[k] = (quant_importance){.act = mods[k],
                                      .module_path = mods[k],
                                      .w = parts[p].in_hidden ? wh : wi,
                                      .n = parts[p].in_hidden ? d->hidden : d->inter};
        }
    quant_ck_error err;
    check(quant_imatrix_write(path, e, n, "gguf-bench", &err), &err);
    free(e);
    free(mods);
    free(wh);
    free(wi);
}

/* ---- timing ------------------------------------------------------------------------------------
 */

typedef struct row {
    const char *label;
    char *argv[20];
    const char *out; /* removed after each run (NULL: none) */
    double best, cpu;
    long rss_kib;
    bool skip;
} row;

static void time_row(row *r)
{
    if (r->skip) return;
    sync();
    struct rusage ru;
    double t0 = bench_now();
    int status = bench_spawn_wait(r->argv, &ru);
    double t = bench_now() - t0;
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        bench_fail("%s failed (status %d)", r->argv[0], status);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    if (t < r->best) r->best = t;
    if (cpu < r->cpu) r->cpu = cpu;
    if (ru.ru_maxrss > r->rss_kib) r->rss_kib = ru.ru_maxrss;
    if (r->out) unlink(r->out);
}

static const char *llama_quantize(void)
{
    const char *env = getenv("LLAMA_QUANTIZE");
    if (env && *env) return access(env, X_OK) == 0 ? env : NULL;
    return system("command -v llama-quantize > /dev/null 2>&1") == 0 ? "llama-quantize" : NULL;
}

int main(int argc, char **argv)
{
    bench_init("gguf-bench");
    if (argc != 2) {
        fprintf(stderr, "usage: gguf-bench QUANT_BINARY\n");
        return 2;
    }
    const char *env = getenv("QUANT_BENCH_GGUF_MIB"), *th = getenv("QUANT_BENCH_THREADS");
    const char *reps_env = getenv("QUANT_BENCH_REPS");
    long mib = env ? atol(env) : 1024;
    char *threads = (char *)(th ? th : "2");
    int reps = reps_env && atoi(reps_env) > 0 ? atoi(reps_env) : 2;
    dims d = model_dims(mib < 1 ? 1 : mib);
    const char *root = bench_make_root();
    char in[4200], hf[4200], im[4200], out[4200], cpout[4200];
    snprintf(in, sizeof in, "%s/model-bf16.gguf", root);
    snprintf(hf, sizeof hf, "%s/hf", root);
    snprintf(im, sizeof im, "%s/imatrix.gguf", root);
    snprintf(out, sizeof out, "%s/out.gguf", root);
    snprintf(cpout, sizeof cpout, "%s/cp.gguf", root);
    size_t big = (size_t)(d.inter > d.vocab ? d.inter : d.vocab) * (size_t)d.hidden * 4;
    uint16_t *buf = malloc(big);
    if (!buf) bench_die("malloc");
    write_gguf(in, &d, buf);
    write_hf(hf, &d, buf);
    free(buf);
    write_imatrix(im, &d);
    const char *lq = llama_quantize();
    char *q = argv[1];
    row rows[] = {
        {"cat (read-only pass of the GGUF)", {"sh", "-c", NULL}, NULL, 1e30, 1e30, 0, false},
        {"cp of the GGUF", {"cp", in, cpout, NULL}, cpout, 1e30, 1e30, 0, false},
        {"llama-quantize Q4_K_M --imatrix (GGUF in)",
         {"sh", "-c", "exec \"$0\" \"$@\" > /dev/null 2>&1", (char *)(lq ? lq : "-"), "--imatrix",
          im, in, out, "Q4_K_M", threads, NULL},
         out,
         1e30,
         1e30,
         0,
         lq == NULL},
        {"quant Q4_K_M --imatrix (GGUF in)",
         {q, "quantize", "-q", "--layout", "gguf", "--mix", "Q4_K_M", "--imatrix", im, "--threads",
          threads, in, out, NULL},
         out,
         1e30,
         1e30,
         0,
         false},
        {"quant Q4_K_M --imatrix (Hugging Face dir in)",
         {q, "quantize", "-q", "--layout", "gguf", "--mix", "Q4_K_M", "--imatrix", im,
          "--vocab-from", in, "--threads", threads, hf, out, NULL},
         out,
         1e30,
         1e30,
         0,
         false},
    };
    char cat_cmd[4400];
    snprintf(cat_cmd, sizeof cat_cmd, "cat '%s' > /dev/null", in);
    rows[0].argv[2] = cat_cmd;
    size_t n = sizeof rows / sizeof rows[0];
    struct stat sb;
    if (stat(in, &sb) != 0) bench_die(in);
    double gib = (double)sb.st_size / (1u << 30);
    printf("gguf-bench: %.2f GiB of BF16 (%lld layers, rows of %lld and %lld), %s threads, %d "
           "rounds, load %s\n",
           gib, (long long)d.layers, (long long)d.hidden, (long long)d.inter, threads, reps,
           bench_load_avg());
    for (int r = 0; r < reps; r++)
        for (size_t i = 0; i < n; i++) time_row(&rows[i]);
    printf("\n| run | wall s | CPU s | GiB/s | peak RSS MiB | read-only pass / it | "
           "llama-quantize / it |\n|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        if (rows[i].skip) {
            printf("| %s | not found (set LLAMA_QUANTIZE) | | | | | |\n", rows[i].label);
            continue;
        }
        char ratio[32] = "";
        if (!rows[2].skip && i >= 2)
            snprintf(ratio, sizeof ratio, "%.2fx", rows[2].best / rows[i].best);
        printf("| %s | %.2f | %.2f | %.2f | %.0f | %.3f | %s |\n", rows[i].label, rows[i].best,
               rows[i].cpu, gib / rows[i].best, (double)rows[i].rss_kib / 1024.0,
               rows[0].best / rows[i].best, ratio);
    }
    printf("\nload after: %s\n", bench_load_avg());
    return bench_finish(0);
}
