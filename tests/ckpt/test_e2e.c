/* test_e2e.c -- whole checkpoints through the `quant` binary ($QUANT_BIN), quantize then
 * dequantize, as a user runs them: a generated two-layer Llama in Hugging Face layout (two BF16
 * shards, index, config, tokenizer) under a realistic rule set (attention and MLP int4 tile 128,
 * embeddings and lm_head excluded, norms untouched), and the stories260K fixture under int8
 * per-channel. Owns the checks that the output directory is complete (shards, index, copied
 * files), that the report has one right entry per input tensor, and that every dequantized
 * tensor comes back within the error the report states (and within half a step of its own tile).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_pipeline.h"

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX  "model.safetensors.index.json"
#define REPORT "quant-report.json"

static const char *const shard_names[] = {SHARD1, SHARD2};

/* ---- running the binary --------------------------------------------------------------------- */

static int wait_status(pid_t pid)
{
    int ws;
    while (waitpid(pid, &ws, 0) < 0) ck_assert_int_eq(errno, EINTR);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* In the child: stdin from /dev/null, stdout and stderr into `log`, then quant ARGS. */
static void exec_quant(const char *bin, const char *const *args, const char *log)
{
    int in = open("/dev/null", O_RDONLY), out = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 ||
        dup2(out, STDERR_FILENO) < 0)
        _exit(126);
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)"quant";
    for (; args[n - 1] && n < 15; n++) argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    execv(bin, argv);
    _exit(127);
}

/* Runs quant with the NULL-terminated `args`; it must exit 0 and print nothing (QUANT_OK adds
 * --quiet). Its output goes through a log file in `dir`. */
static void quant_ok(const char *dir, const char *const *args)
{
    const char *bin = getenv("QUANT_BIN");
    ck_assert_msg(bin && *bin && access(bin, X_OK) == 0,
                  "QUANT_BIN must name the quant binary to test");
    char *log = kit_join(dir, "quant.log");
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) exec_quant(bin, args, log);
    int status = wait_status(pid);
    size_t n = 0;
    char *text = kit_read_file(log, &n);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(status == 0 && n == 0, "quant %s: exit %d, output '%.*s'", args[0], status,
                  (int)n, text);
    free(text);
    unlink(log);
    free(log);
}

#define QUANT_OK(dir, ...) quant_ok(dir, (const char *const[]){__VA_ARGS__, "--quiet", NULL})

/* ---- reading files -------------------------------------------------------------------------- */

static json_t *load_json(const char *dir, const char *name)
{
    char *path = kit_join(dir, name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", path, je.text);
    free(path);
    return j;
}

/* One tensor of a shard: its header entry (name cleared) and its bytes. */
typedef struct tensor_data {
    quant_st_tensor info;
    void *raw;
    size_t nbytes;
} tensor_data;

static tensor_data load_tensor(const char *dir, const char *shard, const char *name)
{
    char *path = kit_join(dir, shard);
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    const quant_st_tensor *t = quant_st_find(f, name);
    ck_assert_msg(t != NULL, "%s: no tensor %s", path, name);
    tensor_data d = {.info = *t, .nbytes = (size_t)quant_st_nbytes(t)};
    d.info.name = NULL;
    d.raw = malloc(d.nbytes ? d.nbytes : 1);
    ck_assert_ptr_nonnull(d.raw);
    ck_assert_msg(quant_st_read(f, t, 0, d.raw, d.nbytes, &err) == QUANT_CK_OK, "%s", err.message);
    quant_st_close(f);
    free(path);
    return d;
}

/* The values as float: BF16 widens exactly, F32 as is. Caller frees. */
static float *widen(const tensor_data *d, size_t *n)
{
    ck_assert(d->info.dtype == QUANT_ST_BF16 || d->info.dtype == QUANT_ST_F32);
    *n = (size_t)quant_numel(d->info.rank, d->info.shape);
    float *x = malloc(*n * sizeof *x + 1);
    ck_assert_ptr_nonnull(x);
    if (d->info.dtype == QUANT_ST_F32) {
        memcpy(x, d->raw, *n * sizeof *x);
        return x;
    }
    for (size_t i = 0; i < *n; i++) x[i] = quant_bf16_to_f32(((const uint16_t *)d->raw)[i]);
    return x;
}

static void assert_same_file(const char *a_dir, const char *b_dir, const char *name)
{
    char *a = kit_join(a_dir, name), *b = kit_join(b_dir, name);
    size_t na = 0, nb = 0;
    void *da = kit_read_file(a, &na), *db = kit_read_file(b, &nb);
    ck_assert_msg(da && db, "%s or %s is missing", a, b);
    ck_assert_msg(na == nb && memcmp(da, db, na) == 0, "%s differs from %s", b, a);
    free(da);
    free(db);
    free(a);
    free(b);
}

static const char *jstr(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* ---- the generated checkpoint --------------------------------------------------------------- */

#define DIM    256
#define FFN    512
#define VOCAB  256
#define LAYERS 2
#define N_GEN  (3 + 9 * LAYERS)

typedef struct gen_spec {
    char name[64];
    int rank;
    int64_t shape[2];
    int shard; /* 0 or 1 */
} gen_spec;

static void spec(gen_spec *s, int shard, const char *name, int64_t rows, int64_t cols)
{
    snprintf(s->name, sizeof s->name, "%s", name);
    s->rank = cols ? 2 : 1;
    s->shape[0] = rows;
    s->shape[1] = cols;
    s->shard = shard;
}

static void layer_specs(gen_spec *s, int layer)
{
    static const char *const parts[] = {
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
        "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
        "mlp.down_proj",    "input_layernorm",  "post_attention_layernorm"};
    static const int64_t rows[] = {DIM, DIM, DIM, DIM, FFN, FFN, DIM, DIM, DIM};
    static const int64_t cols[] = {DIM, DIM, DIM, DIM, DIM, DIM, FFN, 0, 0};
    for (int i = 0; i < 9; i++) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%d.%s.weight", layer, parts[i]);
        spec(&s[i], layer, name, rows[i], cols[i]);
    }
}

/* Embeddings and layer 0 in the first shard; layer 1, the final norm and lm_head in the second. */
static void llama_specs(gen_spec *s)
{
    spec(&s[0], 0, "model.embed_tokens.weight", VOCAB, DIM);
    for (int l = 0; l < LAYERS; l++) layer_specs(&s[1 + 9 * l], l);
    spec(&s[1 + 9 * LAYERS], 1, "model.norm.weight", DIM, 0);
    spec(&s[2 + 9 * LAYERS], 1, "lm_head.weight", VOCAB, DIM);
}

/* BF16 values: norms near 1; matrices near 0 with a magnitude that changes every 64 columns and
 * from row to row, so that tiles of one row have different scales. Caller frees. */
static uint16_t *gen_values(const gen_spec *s, uint64_t seed)
{
    int64_t rows = s->shape[0], cols = s->rank == 2 ? s->shape[1] : 1;
    size_t n = (size_t)(rows * cols);
    float *f = malloc(n * sizeof *f);
    uint16_t *b = malloc(n * sizeof *b);
    ck_assert(f && b);
    ck_fill(f, n, seed, s->rank == 2 ? 0.02f : 0.1f);
    for (size_t i = 0; i < n; i++) {
        int64_t r = (int64_t)i / cols, c = (int64_t)i % cols;
        float v = s->rank == 2 ? f[i] * (float)(1 + (r * 3 + c / 64) % 5) : 1.0f + f[i];
        b[i] = quant_f32_to_bf16(v);
    }
    free(f);
    return b;
}

static size_t spec_bytes(const gen_spec *s)
{
    return (size_t)(s->shape[0] * (s->rank == 2 ? s->shape[1] : 1)) * sizeof(uint16_t);
}

static void write_shard(const char *dir, const gen_spec *s, int shard)
{
    kit_st_tensor t[N_GEN];
    uint16_t *data[N_GEN];
    size_t n = 0;
    for (size_t i = 0; i < N_GEN; i++) {
        if (s[i].shard != shard) continue;
        data[n] = gen_values(&s[i], 100 + i);
        t[n] =
            (kit_st_tensor){s[i].name, "BF16",           s[i].rank, {s[i].shape[0], s[i].shape[1]},
                            data[n],   spec_bytes(&s[i])};
        n++;
    }
    char *path = kit_join(dir, shard_names[shard]);
    ck_gen_file(path, t, n, "{\"format\":\"pt\"}");
    for (size_t i = 0; i < n; i++) free(data[i]);
    free(path);
}

static void write_index(const char *dir, const gen_spec *s)
{
    json_t *map = json_object();
    size_t total = 0;
    for (size_t i = 0; i < N_GEN; i++) {
        json_object_set_new(map, s[i].name, json_string(shard_names[s[i].shard]));
        total += spec_bytes(&s[i]);
    }
    json_t *index =
        json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", map);
    char *text = json_dumps(index, JSON_INDENT(2) | JSON_SORT_KEYS);
    char *path = kit_join(dir, INDEX);
    ck_write_file(path, text, strlen(text));
    free(path);
    free(text);
    json_decref(index);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char *path = kit_join(dir, name);
    ck_write_file(path, text, strlen(text));
    free(path);
}

static void gen_llama(const char *dir)
{
    gen_spec s[N_GEN];
    llama_specs(s);
    write_shard(dir, s, 0);
    write_shard(dir, s, 1);
    write_index(dir, s);
    write_text(dir, "config.json",
               "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\","
               "\"hidden_size\":256,\"intermediate_size\":512,\"num_hidden_layers\":2,"
               "\"vocab_size\":256,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}");
    write_text(dir, "tokenizer.json", "{\"version\":\"1.0\",\"model\":{\"type\":\"BPE\"}}");
}

/* ---- what the rules should do to each tensor ------------------------------------------------ */

typedef struct expect {
    const char *qtype;  /* NULL: copied */
    int64_t tile;       /* scale tile on the last axis; 0 = per-channel (whole row) */
    double min_sqnr_db; /* a plausible floor for the qtype */
    long rule;          /* the deciding rule, -1 for none (JSON null) */
    const char *reason; /* why it is copied */
} expect;

typedef expect (*expect_fn)(const char *name, int rank);

static const expect copied_rank1 = {.rule = -1, .reason = "rank < 2"};

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static const char llama_rules[] =
    "[{\"module_path\": \"(model\\\\.embed_tokens|lm_head)\", \"weight_qtype\": null},\n"
    " {\"module_path\": \"model\\\\.layers\\\\.\\\\d+\\\\.(self_attn|mlp)\\\\..*\",\n"
    "  \"weight_qtype\": \"int4\", \"tile_size\": 128}]\n";

static expect expect_llama(const char *name, int rank)
{
    if (rank < 2) return copied_rank1;
    if (strcmp(name, "model.embed_tokens.weight") == 0 || strcmp(name, "lm_head.weight") == 0)
        return (expect){.rule = 0, .reason = "rule has a null weight_qtype"};
    return (expect){.qtype = "int4", .tile = 128, .min_sqnr_db = 10.0, .rule = 1};
}

static const char stories_rules[] = "[{\"module_path\": \".*proj\", \"weight_qtype\": \"int8\"}]";

static expect expect_stories(const char *name, int rank)
{
    if (rank < 2) return copied_rank1;
    if (ends_with(name, "_proj.weight"))
        return (expect){.qtype = "int8", .min_sqnr_db = 30.0, .rule = 0};
    return (expect){.rule = -1, .reason = "no rule matched"};
}

/* ---- the output directory ------------------------------------------------------------------- */

static bool is_shard_name(const char *name)
{
    return strcmp(name, SHARD1) == 0 || strcmp(name, SHARD2) == 0;
}

/* Adds the shard's tensors to `seen` (name -> shard) and returns its data bytes; every tensor
 * must be in the weight map under this shard. */
static uint64_t index_shard(const char *dir, const char *shard, const json_t *map, json_t *seen)
{
    char *path = kit_join(dir, shard);
    quant_st_file *f = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_st_open(path, &f, &err) == QUANT_CK_OK, "%s", err.message);
    uint64_t bytes = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *name = f->tensors[i].name, *where = jstr(map, name);
        ck_assert_msg(where && strcmp(where, shard) == 0, "%s: %s is mapped to %s", path, name,
                      where ? where : "nothing");
        json_object_set_new(seen, name, json_string(shard));
        bytes += quant_st_nbytes(&f->tensors[i]);
    }
    quant_st_close(f);
    free(path);
    return bytes;
}

/* The index of `dir` names exactly the tensors of its two shards, each in its own shard, and
 * its total_size is their data size. Returns the weight map (caller decrefs). */
static json_t *check_index(const char *dir)
{
    json_t *index = load_json(dir, INDEX), *seen = json_object();
    json_t *map = json_object_get(index, "weight_map");
    ck_assert(json_is_object(map));
    uint64_t bytes = 0;
    for (size_t s = 0; s < 2; s++) bytes += index_shard(dir, shard_names[s], map, seen);
    ck_assert_msg(json_equal(map, seen), "%s: the weight map names tensors no shard holds", dir);
    json_int_t total =
        json_integer_value(json_object_get(json_object_get(index, "metadata"), "total_size"));
    ck_assert_int_eq(total, (json_int_t)bytes);
    json_incref(map);
    json_decref(index);
    json_decref(seen);
    return map;
}

/* ---- the report ----------------------------------------------------------------------------- */

static void check_shape(const json_t *a, int rank, const int64_t *shape)
{
    ck_assert_int_eq(json_array_size(a), rank);
    for (int i = 0; i < rank; i++)
        ck_assert_int_eq(json_integer_value(json_array_get(a, (size_t)i)), shape[i]);
}

static void check_entry_rule(const json_t *e, const expect *x)
{
    const char *name = jstr(e, "name");
    const json_t *rule = json_object_get(e, "rule");
    if (x->rule < 0)
        ck_assert_msg(json_is_null(rule), "%s: a rule where none applies", name);
    else
        ck_assert_msg(json_integer_value(rule) == x->rule, "%s: rule %lld, want %ld", name,
                      (long long)json_integer_value(rule), x->rule);
}

static void check_quantized_entry(const json_t *e, const expect *x, const quant_st_tensor *in)
{
    const char *name = jstr(e, "name");
    ck_assert_msg(strcmp(jstr(e, "action"), "quantized") == 0, "%s was not quantized", name);
    ck_assert_str_eq(jstr(e, "qtype"), x->qtype);
    int64_t scale[2] = {in->shape[0], x->tile ? in->shape[1] / x->tile : 1};
    check_shape(json_object_get(e, "scale_shape"), 2, scale);
    double sqnr = json_number_value(json_object_get(e, "sqnr_db"));
    ck_assert_msg(json_is_real(json_object_get(e, "sqnr_db")) && sqnr > x->min_sqnr_db,
                  "%s: SQNR %g dB", name, sqnr);
    ck_assert_msg(json_number_value(json_object_get(e, "max_abs_error")) > 0.0, "%s", name);
}

static void check_copied_entry(const json_t *e, const expect *x)
{
    const char *name = jstr(e, "name");
    ck_assert_msg(strcmp(jstr(e, "action"), "copied") == 0, "%s was quantized", name);
    ck_assert_msg(jstr(e, "reason") && strcmp(jstr(e, "reason"), x->reason) == 0,
                  "%s: reason '%s', want '%s'", name, jstr(e, "reason"), x->reason);
    ck_assert_ptr_null(json_object_get(e, "qtype"));
    ck_assert_ptr_null(json_object_get(e, "max_abs_error"));
}

/* One entry against the input tensor it describes and what the rules should have done. */
static void check_entry(const json_t *e, const char *in_dir, expect_fn fn)
{
    const char *name = jstr(e, "name"), *shard = jstr(e, "shard");
    ck_assert_msg(name && shard && is_shard_name(shard), "bad entry %s in %s", name, shard);
    tensor_data in = load_tensor(in_dir, shard, name);
    ck_assert_str_eq(jstr(e, "dtype"), quant_st_dtype_name(in.info.dtype));
    check_shape(json_object_get(e, "shape"), in.info.rank, in.info.shape);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "bytes_in")), (json_int_t)in.nbytes);
    expect x = fn(name, in.info.rank);
    check_entry_rule(e, &x);
    if (x.qtype)
        check_quantized_entry(e, &x, &in.info);
    else
        check_copied_entry(e, &x);
    free(in.raw);
}

/* Counts and the worst SQNR in the summary agree with the entries. */
static void check_summary(const json_t *rep, size_t n, size_t quantized, double worst)
{
    const json_t *s = json_object_get(rep, "summary");
    ck_assert_int_eq(json_integer_value(json_object_get(s, "tensors")), (json_int_t)n);
    ck_assert_int_eq(json_integer_value(json_object_get(s, "quantized")), (json_int_t)quantized);
    ck_assert_int_eq(json_integer_value(json_object_get(s, "copied")), (json_int_t)(n - quantized));
    ck_assert(json_number_value(json_object_get(s, "min_sqnr_db")) == worst);
}

/* The report in `out`: one entry per tensor of the input's weight map (in its shard), each
 * right by `fn`. Returns it (caller decrefs). */
static json_t *check_report(const char *out, const char *in_dir, const json_t *in_map, expect_fn fn,
                            size_t want_quantized)
{
    json_t *rep = load_json(out, REPORT), *seen = json_object(), *e;
    ck_assert_str_eq(jstr(rep, "format"), "quantd.report/1");
    ck_assert_str_eq(jstr(rep, "layout"), "native");
    size_t i, quantized = 0;
    double worst = INFINITY;
    json_array_foreach(json_object_get(rep, "tensors"), i, e)
    {
        const char *name = jstr(e, "name");
        ck_assert_msg(!json_object_get(seen, name), "%s is reported twice", name);
        json_object_set_new(seen, name, json_string(jstr(e, "shard")));
        check_entry(e, in_dir, fn);
        if (!json_object_get(e, "qtype")) continue;
        quantized++;
        worst = fmin(worst, json_number_value(json_object_get(e, "sqnr_db")));
    }
    ck_assert_msg(json_equal(seen, in_map), "the report does not list every input tensor once");
    ck_assert_uint_eq(quantized, want_quantized);
    check_summary(rep, i, quantized, worst);
    json_decref(seen);
    return rep;
}

/* ---- the native layout of the quantized shards ---------------------------------------------- */

static uint64_t check_part(const char *dir, const char *shard, const char *name, const char *suffix,
                           quant_st_dtype dtype, const int64_t *shape)
{
    char full[160];
    snprintf(full, sizeof full, "%s%s", name, suffix);
    tensor_data d = load_tensor(dir, shard, full);
    ck_assert_msg(d.info.dtype == dtype, "%s: dtype %s", full, quant_st_dtype_name(d.info.dtype));
    ck_assert_int_eq(d.info.rank, 2);
    ck_assert_msg(d.info.shape[0] == shape[0] && d.info.shape[1] == shape[1],
                  "%s: shape [%lld, %lld]", full, (long long)d.info.shape[0],
                  (long long)d.info.shape[1]);
    free(d.raw);
    return d.nbytes;
}

static bool shard_has(const char *dir, const char *shard, const char *name)
{
    char *path = kit_join(dir, shard);
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(path, &f, NULL), QUANT_CK_OK);
    bool found = quant_st_find(f, name) != NULL;
    quant_st_close(f);
    free(path);
    return found;
}

/* A quantized NAME is NAME.qvalue (int4 packed two per byte, int8 as I8) and NAME.scale (F32,
 * the reported scale shape), with neither NAME nor a zero point left; bytes_out is their size. */
static void check_layout_entry(const json_t *e, const char *out)
{
    const char *name = jstr(e, "name"), *shard = jstr(e, "shard");
    if (!json_object_get(e, "qtype")) {
        ck_assert_msg(shard_has(out, shard, name), "%s: copied tensor %s missing", shard, name);
        return;
    }
    bool int4 = strcmp(jstr(e, "qtype"), "int4") == 0;
    const json_t *shape = json_object_get(e, "shape"), *ss = json_object_get(e, "scale_shape");
    int64_t rows = json_integer_value(json_array_get(shape, 0));
    int64_t cols = json_integer_value(json_array_get(shape, 1));
    int64_t q[2] = {rows, int4 ? (cols + 1) / 2 : cols};
    int64_t s[2] = {json_integer_value(json_array_get(ss, 0)),
                    json_integer_value(json_array_get(ss, 1))};
    uint64_t bytes = check_part(out, shard, name, ".qvalue", int4 ? QUANT_ST_U8 : QUANT_ST_I8, q);
    bytes += check_part(out, shard, name, ".scale", QUANT_ST_F32, s);
    char zp[160];
    snprintf(zp, sizeof zp, "%s.zero_point", name);
    ck_assert_msg(!shard_has(out, shard, name) && !shard_has(out, shard, zp),
                  "%s: %s or its zero point left beside the quantized parts", shard, name);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "bytes_out")), (json_int_t)bytes);
}

static void check_layout(const json_t *rep, const char *out)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(rep, "tensors"), i, e) check_layout_entry(e, out);
}

/* ---- the round trip ------------------------------------------------------------------------- */

/* Error statistics of dequantized `y` against original `x`. */
typedef struct err_stats {
    double max_err, sum_x2, sum_e2;
} err_stats;

/* Every tile (`tile` columns of one row) is back within half a quantization step of its own
 * absmax: independent of the library's scales, so a wrong scale granularity shows. The slack is
 * float32 rounding: of the scale (relative 2^-24) and of q * scale (half an ulp of the largest
 * value, which is a visible 1e-5 of the step for int8). */
static err_stats compare_tiles(const float *x, const float *y, int64_t rows, int64_t cols,
                               int64_t tile, double bound, const char *name)
{
    err_stats s = {0};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t0 = 0; t0 < cols; t0 += tile) {
            double absmax = 0, tile_err = 0;
            for (int64_t c = t0; c < t0 + tile; c++) {
                double a = x[r * cols + c], e = a - (double)y[r * cols + c];
                absmax = fmax(absmax, fabs(a));
                tile_err = fmax(tile_err, fabs(e));
                s.sum_x2 += a * a;
                s.sum_e2 += e * e;
            }
            ck_assert_msg(tile_err <= absmax / (2 * bound) * (1 + 1e-6) + absmax * 0x1p-23,
                          "%s: row %lld, columns %lld+: error %g beyond half a step (absmax %g)",
                          name, (long long)r, (long long)t0, tile_err, absmax);
            s.max_err = fmax(s.max_err, tile_err);
        }
    return s;
}

/* The report measures the very fake-quant values `dequantize --dtype f32` writes (SPEC section
 * 5: dequantize(quantize(x)) is bit-identical to fake_quant(x)), in double from the widened
 * input, and JSON keeps the double exactly: the maximum errors must agree (today they are
 * equal to the bit). The 1e-9 relative slack only allows a report that rounds its figure; the
 * SQNR, summed in another order here, gets 1e-6 dB. */
static void check_values(const json_t *e, const tensor_data *in, const tensor_data *dq)
{
    const char *name = jstr(e, "name");
    ck_assert_msg(dq->info.dtype == QUANT_ST_F32, "%s: dequantized as %s", name,
                  quant_st_dtype_name(dq->info.dtype));
    size_t n, m;
    float *x = widen(in, &n), *y = widen(dq, &m);
    ck_assert_uint_eq(n, m);
    const json_t *ss = json_object_get(e, "scale_shape");
    int64_t rows = in->info.shape[0], cols = in->info.shape[1];
    int64_t tile = cols / json_integer_value(json_array_get(ss, 1));
    double bound = strcmp(jstr(e, "qtype"), "int4") == 0 ? 7.5 : 127.5;
    err_stats s = compare_tiles(x, y, rows, cols, tile, bound, name);
    double max_err = json_number_value(json_object_get(e, "max_abs_error"));
    double sqnr = json_number_value(json_object_get(e, "sqnr_db"));
    ck_assert_msg(s.max_err <= max_err * (1 + 1e-9),
                  "%s: dequantized error %.17g exceeds the reported %.17g", name, s.max_err,
                  max_err);
    ck_assert_msg(s.max_err >= max_err * (1 - 1e-9),
                  "%s: reported error %.17g is not attained (%.17g)", name, max_err, s.max_err);
    double mine = 10.0 * log10(s.sum_x2 / s.sum_e2);
    ck_assert_msg(fabs(mine - sqnr) <= 1e-6, "%s: SQNR %.9g dB, reported %.9g", name, mine, sqnr);
    free(x);
    free(y);
}

/* Every input tensor is in `dq` under its name and shape: quantized ones as F32 within the
 * reported error, copied ones bit-identical. */
static void check_round_trip(const json_t *rep, const char *in_dir, const char *dq_dir)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(rep, "tensors"), i, e)
    {
        const char *name = jstr(e, "name"), *shard = jstr(e, "shard");
        tensor_data in = load_tensor(in_dir, shard, name), dq = load_tensor(dq_dir, shard, name);
        ck_assert_int_eq(in.info.rank, dq.info.rank);
        ck_assert_mem_eq(in.info.shape, dq.info.shape, sizeof in.info.shape);
        if (json_object_get(e, "qtype")) {
            check_values(e, &in, &dq);
        } else {
            ck_assert_int_eq(in.info.dtype, dq.info.dtype);
            ck_assert_uint_eq(in.nbytes, dq.nbytes);
            ck_assert_msg(memcmp(in.raw, dq.raw, in.nbytes) == 0, "%s changed", name);
        }
        free(in.raw);
        free(dq.raw);
    }
}

/* ---- the runs ------------------------------------------------------------------------------- */

/* quantize IN -> OUT by `rules`, check OUT and its report, dequantize OUT -> DQ, check DQ. */
static void quantize_and_back(const char *root, const char *in, const char *rules, expect_fn fn,
                              size_t want_quantized, const char *const *others)
{
    char *out = kit_join(root, "out"), *dq = kit_join(root, "dq");
    QUANT_OK(root, "quantize", "--rules", rules, in, out);
    size_t n_others = 0;
    for (; others[n_others]; n_others++) assert_same_file(in, out, others[n_others]);
    ck_assert_int_eq(ck_count_entries(out), (int)(n_others + 4)); /* + shards, index, report */
    json_t *in_map = load_json(in, INDEX), *out_map = check_index(out);
    json_t *rep = check_report(out, in, json_object_get(in_map, "weight_map"), fn, want_quantized);
    check_layout(rep, out);

    QUANT_OK(root, "dequantize", "--dtype", "f32", out, dq);
    json_t *dq_map = check_index(dq);
    ck_assert_msg(json_equal(dq_map, json_object_get(in_map, "weight_map")),
                  "the dequantized index does not map the input's tensors to their shards");
    for (size_t i = 0; i < n_others; i++) assert_same_file(in, dq, others[i]);
    check_round_trip(rep, in, dq);
    json_decref(rep);
    json_decref(in_map);
    json_decref(out_map);
    json_decref(dq_map);
    free(out);
    free(dq);
}

START_TEST(test_generated_llama)
{
    char *root = ck_tmpdir(), *in = kit_join(root, "in"), *rules = kit_join(root, "rules.json");
    ck_assert_int_eq(mkdir(in, 0755), 0);
    gen_llama(in);
    ck_write_file(rules, llama_rules, strlen(llama_rules));
    static const char *const others[] = {"config.json", "tokenizer.json", NULL};
    quantize_and_back(root, in, rules, expect_llama, 7 * LAYERS, others);
    kit_rmtree(root);
    free(root);
    free(in);
    free(rules);
}
END_TEST

START_TEST(test_stories260k)
{
    char *root = ck_tmpdir(), *rules = kit_join(root, "rules.json");
    char *in = kit_join(ck_data_dir(), "stories260K-bf16-sharded");
    ck_write_file(rules, stories_rules, strlen(stories_rules));
    static const char *const others[] = {"config.json", NULL};
    quantize_and_back(root, in, rules, expect_stories, 7 * 5, others);
    kit_rmtree(root);
    free(root);
    free(in);
    free(rules);
}
END_TEST

Suite *suite_e2e(void)
{
    Suite *s = suite_create("e2e");
    TCase *tc = tcase_create("e2e");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_generated_llama);
    tcase_add_test(tc, test_stories260k);
    suite_add_tcase(s, tc);
    return s;
}
