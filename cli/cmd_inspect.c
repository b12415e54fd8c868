/* cmd_inspect.c -- `quant inspect [--json] FILE`: the tensors of a safetensors file as a table
 * (name, dtype, shape, qtype, scale min/max, size) or a JSON document. In a native-layout file
 * (SPEC section 7, read by the library's quant_native_read) the parts of a quantized tensor NAME
 * make one row with its original dtype and shape, its qtype and the range of its scale; in a
 * compressed-tensors file (quant_ct_read, with the config.json beside FILE when there is one)
 * the parts of a weight P.weight make one row with its shape, qtype, format and the range of its
 * effective scale; every other tensor is a row of its own. Metadata keys are listed too. A GGUF
 * file (recognised by its magic) is reported by inspect_gguf.c.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "quant_ctensors.h"
#include "quant_gguf.h"
#include "quant_native.h"

#define CMD            "inspect"
#define META_VALUE_MAX 72          /* longer metadata values are cut in the table */
#define SCALE_CHUNK    (64u << 10) /* bytes of a scale tensor read at a time */

static const char usage[] =
    "usage: quant inspect [options] FILE\n"
    "\n"
    "Lists the tensors of the safetensors file FILE: name, dtype, shape, qtype, scale min/max\n"
    "and size. Quantized tensors of the native layout (NAME.qvalue, NAME.scale, NAME.zero_point)\n"
    "are shown as one row NAME with their original dtype and shape; compressed-tensors weights\n"
    "(P.weight_packed or P.weight, P.weight_scale, ...; with the config.json beside FILE when\n"
    "there is one) as one row P.weight with its shape, qtype and effective scale range.\n"
    "\n"
    "A GGUF file (llama.cpp's format, recognised by its magic whatever its name) is listed\n"
    "with its key-value pairs (long arrays by element type and length) and its tensors: name,\n"
    "ggml type, shape (PyTorch order: GGUF's dimensions reversed) and size.\n"
    "\n"
    "options:\n"
    "  -j, --json             print a JSON document instead of the table\n"
    "  -h, --help             this text\n";

/* One logical tensor. */
typedef struct row {
    const char *name;
    const char *dtype; /* original dtype name */
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    const char *qtype; /* NULL for a plain tensor */
    bool packed;       /* quantized: codes stored two per byte */
    bool has_global;   /* nvfp4: the metadata's per-tensor global scale g */
    double global_scale;
    const quant_st_tensor *scale; /* quantized: the NAME.scale tensor */
    const quant_ct_tensor *ct;    /* a compressed-tensors weight, or NULL */
    const char *format;           /* its compressed-tensors format */
    bool has_range;               /* the scale is a float tensor with a finite element */
    double smin, smax;
    uint64_t bytes; /* data bytes of every part */
} row;

typedef struct inspection {
    quant_st_file *f;
    quant_native nat;     /* the native layout's quantized tensors (none in other files) */
    quant_ct_config *cfg; /* compressed-tensors: the config.json beside the file, or NULL */
    quant_ct ct;          /* compressed-tensors' quantized weights (none in other files) */
    size_t n;
    row *rows;
} inspection;

/* ---- one row per logical tensor ------------------------------------------------------------- */

static void quantized_row(row *r, const quant_native_tensor *e)
{
    r->name = e->name;
    r->qtype = quant_qtype_traits_get(e->how.qtype)->name;
    r->packed = e->how.pack;
    r->has_global = e->has_global_scale;
    r->global_scale = e->global_scale;
    r->scale = e->scale;
    r->bytes = quant_st_nbytes(e->qvalue) + quant_st_nbytes(e->scale) +
               (e->zero_point ? quant_st_nbytes(e->zero_point) : 0);
    if (e->orig_dtype) r->dtype = e->orig_dtype;
    r->rank = e->rank;
    memcpy(r->shape, e->shape, sizeof r->shape);
}

static void ct_row(row *r, const quant_ct_tensor *e)
{
    r->name = e->name;
    r->dtype = NULL; /* compressed-tensors does not record it */
    r->qtype = quant_qtype_traits_get(e->how.qtype)->name;
    r->packed = e->how.pack || e->form == QUANT_CT_PACK32;
    r->ct = e;
    r->format = e->format;
    const quant_st_tensor *parts[] = {e->data, e->scale, e->zero_point, e->global_scale,
                                      e->shape_t};
    r->bytes = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        r->bytes += parts[i] ? quant_st_nbytes(parts[i]) : 0;
    r->rank = 2;
    r->shape[0] = e->shape[0];
    r->shape[1] = e->shape[1];
}

/* Adds the row of file tensor `t`: NAME for the .qvalue of a quantized tensor NAME (P.weight
 * for the codes of a compressed-tensors weight), nothing for their other parts, the tensor
 * itself otherwise. */
static void add_row(inspection *in, const quant_st_tensor *t)
{
    const quant_native_tensor *e = quant_native_owner(&in->nat, t);
    const quant_ct_tensor *ce = quant_ct_owner(&in->ct, t);
    if ((e && e->qvalue != t) || (ce && ce->data != t)) return;
    row *r = &in->rows[in->n++];
    memset(r, 0, sizeof *r);
    r->name = t->name;
    r->dtype = quant_st_dtype_name(t->dtype);
    r->rank = t->rank;
    memcpy(r->shape, t->shape, sizeof r->shape);
    r->bytes = quant_st_nbytes(t);
    if (e) quantized_row(r, e);
    if (ce) ct_row(r, ce);
}

static int cmp_rows(const void *a, const void *b)
{
    return strcmp(((const row *)a)->name, ((const row *)b)->name);
}

/* ---- scale ranges --------------------------------------------------------------------------- */

static void range_of(row *r, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) continue;
        if (!r->has_range || x[i] < r->smin) r->smin = x[i];
        if (!r->has_range || x[i] > r->smax) r->smax = x[i];
        r->has_range = true;
    }
}

/* A compressed-tensors weight: the range of its effective scales, nvfp4's global scale. */
static quant_ck_status ct_scale_range(const inspection *in, row *r, quant_ck_error *err)
{
    const quant_ct_tensor *e = r->ct;
    size_t n = (size_t)quant_numel(e->scale->rank, e->scale->shape);
    float *x = malloc(n ? n * sizeof *x : 1);
    quant_ck_status st = x ? quant_ct_scales(&in->ct, e, x, n, err)
                           : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (st == QUANT_CK_OK) range_of(r, x, n);
    float g;
    if (st == QUANT_CK_OK && e->global_scale &&
        (st = quant_st_read(in->f, e->global_scale, 0, &g, sizeof g, err)) == QUANT_CK_OK) {
        r->has_global = true;
        r->global_scale = g;
    }
    free(x);
    return st;
}

/* Reads the scale of `r` a chunk at a time, converting it to f32. */
static quant_ck_status scale_range(const quant_st_file *f, row *r, quant_ck_error *err)
{
    quant_dtype qd;
    if (!r->scale || !quant_st_to_quant_dtype(r->scale->dtype, &qd) || !quant_dtype_is_float(qd))
        return QUANT_CK_OK;
    size_t esize = quant_dtype_size(qd), per = SCALE_CHUNK / esize;
    uint64_t total = quant_st_nbytes(r->scale) / esize;
    void *raw = malloc(SCALE_CHUNK);
    float *x = malloc(per * sizeof *x);
    quant_ck_status st =
        raw && x ? QUANT_CK_OK : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (uint64_t done = 0; st == QUANT_CK_OK && done < total;) {
        size_t n = total - done < per ? (size_t)(total - done) : per;
        st = quant_st_read(f, r->scale, done * esize, raw, n * esize, err);
        quant_error qe;
        if (st == QUANT_CK_OK &&
            quant_convert(qd, raw, QUANT_DTYPE_F32, x, (int64_t)n, &qe) != QUANT_OK)
            st = quant_ck_fail(err, QUANT_CK_ERR_QUANT, "%s: %s", r->scale->name, qe.message);
        if (st == QUANT_CK_OK) range_of(r, x, n);
        done += n;
    }
    free(raw);
    free(x);
    return st;
}

/* ---- loading -------------------------------------------------------------------------------- */

static void inspection_free(inspection *in)
{
    free(in->rows);
    quant_native_free(&in->nat);
    quant_ct_free(&in->ct);
    quant_ct_config_free(in->cfg);
    quant_st_close(in->f);
}

static quant_ck_status inspect_file(const char *path, inspection *in, quant_ck_error *err)
{
    memset(in, 0, sizeof *in);
    quant_ck_status st = quant_st_open(path, &in->f, err);
    if (st == QUANT_CK_OK) st = quant_native_read(in->f, &in->nat, err);
    if (st == QUANT_CK_OK && !in->nat.has_metadata)
        st = quant_ct_config_beside(path, &in->cfg, err);
    if (st == QUANT_CK_OK && !in->nat.has_metadata && (in->cfg || quant_ct_looks_like(in->f)))
        st = quant_ct_read(in->f, in->cfg, &in->ct, err);
    if (st != QUANT_CK_OK) return st;
    in->rows = calloc(in->f->n_tensors ? in->f->n_tensors : 1, sizeof *in->rows);
    if (!in->rows) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < in->f->n_tensors; i++) add_row(in, &in->f->tensors[i]);
    qsort(in->rows, in->n, sizeof *in->rows, cmp_rows);
    for (size_t i = 0; st == QUANT_CK_OK && i < in->n; i++)
        st = in->rows[i].ct ? ct_scale_range(in, &in->rows[i], err)
                            : scale_range(in->f, &in->rows[i], err);
    return st;
}

/* ---- the table ------------------------------------------------------------------------------ */

enum { COL_NAME, COL_DTYPE, COL_SHAPE, COL_QTYPE, COL_SMIN, COL_SMAX, COL_SIZE, N_COLS };

typedef struct cells {
    const char *c[N_COLS];
    char shape[QUANT_MAX_RANK * 22 + 4], smin[32], smax[32], size[32], qtype[64];
} cells;

static void row_cells(const row *r, cells *c)
{
    cli_fmt_shape(r->rank, r->shape, c->shape, sizeof c->shape);
    snprintf(c->smin, sizeof c->smin, "%.6g", r->smin);
    snprintf(c->smax, sizeof c->smax, "%.6g", r->smax);
    cli_fmt_bytes(r->bytes, c->size, sizeof c->size);
    c->c[COL_NAME] = r->name;
    c->c[COL_DTYPE] = r->dtype ? r->dtype : "?";
    c->c[COL_SHAPE] = c->shape;
    c->c[COL_QTYPE] = r->qtype ? r->qtype : "-";
    if (r->qtype && r->has_global) { /* nvfp4: "nvfp4 g=896" */
        snprintf(c->qtype, sizeof c->qtype, "%.32s g=%.6g", r->qtype, r->global_scale);
        c->c[COL_QTYPE] = c->qtype;
    }
    c->c[COL_SMIN] = r->has_range ? c->smin : "-";
    c->c[COL_SMAX] = r->has_range ? c->smax : "-";
    c->c[COL_SIZE] = c->size;
}

static void print_metadata(const inspection *in)
{
    if (in->f->n_meta == 0) return;
    printf("metadata:\n");
    for (size_t i = 0; i < in->f->n_meta; i++) {
        const char *k = in->f->meta_keys[i], *v = in->f->meta_values[i];
        if (strcmp(k, "quantization") == 0 && in->nat.has_metadata) {
            printf("  %s: %s, %zu quantized tensors\n", k, in->nat.format ? in->nat.format : "?",
                   in->nat.n);
        } else if (strlen(v) > META_VALUE_MAX) {
            printf("  %s: %.*s... (%zu bytes)\n", k, META_VALUE_MAX, v, strlen(v));
        } else {
            printf("  %s: %s\n", k, v);
        }
    }
}

typedef struct inspect_rows {
    const inspection *in;
    cells scratch; /* the row's cells, valid until the next row */
} inspect_rows;

static void inspect_row(void *user, size_t i, const char **out)
{
    inspect_rows *t = user;
    row_cells(&t->in->rows[i], &t->scratch);
    memcpy(out, t->scratch.c, sizeof t->scratch.c);
}

static void print_table(const inspection *in)
{
    static const char *const heads[N_COLS] = {"NAME",      "DTYPE",     "SHAPE", "QTYPE",
                                              "SCALE MIN", "SCALE MAX", "SIZE"};
    inspect_rows t = {.in = in};
    cli_print_table(heads, N_COLS, COL_SMIN, in->n, inspect_row, &t);
}

static void print_text(const inspection *in)
{
    size_t quantized = 0;
    uint64_t data = in->f->file_size - in->f->data_start;
    for (size_t i = 0; i < in->n; i++) quantized += in->rows[i].qtype != NULL;
    char size[32], bytes[32];
    cli_fmt_bytes(in->f->file_size, size, sizeof size);
    cli_fmt_bytes(data, bytes, sizeof bytes);
    printf("file: %s (%s, %zu tensors in the file)\n", in->f->path, size, in->f->n_tensors);
    print_metadata(in);
    if (in->ct.n)
        printf("layout: compressed-tensors, %zu quantized weights%s\n", in->ct.n,
               in->cfg ? " (config.json beside it read)" : "");
    printf("\n");
    print_table(in);
    printf("\n%zu tensor%s (%zu quantized), %s of data\n", in->n, in->n == 1 ? "" : "s", quantized,
           bytes);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static json_t *dims(int rank, const int64_t *shape)
{
    json_t *a = json_array();
    for (int i = 0; a && i < rank; i++) json_array_append_new(a, json_integer(shape[i]));
    return a;
}

static json_t *number_or_null(bool ok, double v)
{
    return ok && isfinite(v) ? json_real(v) : json_null();
}

static json_t *row_json(const row *r)
{
    json_t *o =
        json_pack("{s:s, s:s?, s:o, s:s?, s:I}", "name", r->name, "dtype", r->dtype, "shape",
                  dims(r->rank, r->shape), "qtype", r->qtype, "bytes", (json_int_t)r->bytes);
    if (!o || !r->qtype) return o;
    json_object_set_new(o, "packed", json_boolean(r->packed));
    if (r->format) json_object_set_new(o, "format", json_string(r->format));
    if (r->has_global) json_object_set_new(o, "global_scale", json_real(r->global_scale));
    if (r->scale) {
        json_object_set_new(o, "scale_dtype", json_string(quant_st_dtype_name(r->scale->dtype)));
        json_object_set_new(o, "scale_shape", dims(r->scale->rank, r->scale->shape));
    }
    json_object_set_new(o, "scale_min", number_or_null(r->has_range, r->smin));
    json_object_set_new(o, "scale_max", number_or_null(r->has_range, r->smax));
    return o;
}

static json_t *inspection_json(const inspection *in)
{
    json_t *meta = json_object(), *tensors = json_array(), *quant = json_null();
    for (size_t i = 0; meta && i < in->f->n_meta; i++)
        if (strcmp(in->f->meta_keys[i], "quantization") != 0)
            json_object_set_new(meta, in->f->meta_keys[i], json_string(in->f->meta_values[i]));
    if (in->nat.has_metadata) {
        json_decref(quant);
        quant =
            json_pack("{s:s?, s:I}", "format", in->nat.format, "tensors", (json_int_t)in->nat.n);
    } else if (in->ct.n) {
        json_decref(quant);
        quant = json_pack("{s:s, s:I}", "format", "compressed-tensors", "tensors",
                          (json_int_t)in->ct.n);
    }
    for (size_t i = 0; tensors && i < in->n; i++)
        json_array_append_new(tensors, row_json(&in->rows[i]));
    return json_pack("{s:s, s:I, s:o, s:o, s:o}", "file", in->f->path, "file_size",
                     (json_int_t)in->f->file_size, "metadata", meta, "quantization", quant,
                     "tensors", tensors);
}

static int print_json(const inspection *in)
{
    json_t *root = inspection_json(in);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return cli_put_text(text);
}

/* ---- the command ---------------------------------------------------------------------------- */

int cmd_inspect(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool as_json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            as_json = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return CLI_EXIT_OK;
        default:
            return cli_getopt_error(CMD, c, argv);
        }
    }
    if (argc - optind != 1)
        return cli_usage_error(CMD, "expected one FILE, got %d operands", argc - optind);
    if (quant_gguf_sniff(argv[optind])) return cli_inspect_gguf(argv[optind], as_json);
    inspection in;
    quant_ck_error err;
    int rc = CLI_EXIT_OK;
    if (inspect_file(argv[optind], &in, &err) != QUANT_CK_OK)
        rc = cli_ck_error(&err);
    else if (as_json)
        rc = print_json(&in);
    else
        print_text(&in);
    inspection_free(&in);
    if (rc == CLI_EXIT_OK && (fflush(stdout) != 0 || ferror(stdout))) {
        cli_error("write error on standard output");
        rc = CLI_EXIT_FAIL;
    }
    return rc;
}
