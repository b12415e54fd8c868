/* inspect_gguf.c -- `quant inspect` of a GGUF file (cmd_inspect.c hands it over when the file
 * starts with the GGUF magic): the key-value pairs summarised (scalars and short arrays with
 * their values, long arrays by element type and length, long strings cut) and the tensors (name,
 * ggml type, shape in the user's order -- ggml's ne reversed -- and bytes) as text or as one
 * JSON document.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "quant_gguf.h"

#define VALUE_MAX   72 /* longer strings are cut in the text */
#define ARRAY_SHOWN 8  /* arrays up to this length show their values in the text */
#define ARRAY_JSON  16 /* ... and in the JSON document */
#define SHAPE_TEXT  (QUANT_GGUF_MAX_DIMS * 22 + 4)

/* ---- text ------------------------------------------------------------------------------------ */

/* Element i of a pair as text ("6", "1e-05", "\"llama\"", "true"). */
static void element_text(const quant_gguf_kv *kv, uint64_t i, size_t *cursor, char *buf, size_t cap)
{
    int64_t v;
    double d;
    const char *s;
    uint64_t len;
    if (kv->elem == QUANT_GGUF_STRING && quant_gguf_kv_next_string(kv, cursor, &s, &len)) {
        int shown = len > VALUE_MAX ? VALUE_MAX : (int)len;
        snprintf(buf, cap, "\"%.*s\"%s", shown, s, len > VALUE_MAX ? "..." : "");
        for (char *p = buf; *p; p++)
            if ((unsigned char)*p < 0x20) *p = '?'; /* one line per pair */
    } else if (kv->elem == QUANT_GGUF_BOOL && quant_gguf_kv_int(kv, i, &v)) {
        snprintf(buf, cap, "%s", v ? "true" : "false");
    } else if (quant_gguf_kv_int(kv, i, &v)) {
        snprintf(buf, cap, "%" PRId64, v);
    } else if (quant_gguf_kv_float(kv, i, &d)) {
        snprintf(buf, cap, "%.9g", d);
    } else {
        snprintf(buf, cap, "(too large for int64)");
    }
}

static void print_kv(const quant_gguf_kv *kv)
{
    char v[VALUE_MAX + 16];
    size_t cursor = 0;
    if (kv->type != QUANT_GGUF_ARRAY) {
        element_text(kv, 0, &cursor, v, sizeof v);
        printf("  %s: %s %s\n", kv->key, quant_gguf_type_name(kv->type), v);
        return;
    }
    printf("  %s: array of %" PRIu64 " %s", kv->key, kv->n, quant_gguf_type_name(kv->elem));
    if (kv->n <= ARRAY_SHOWN) {
        printf(" [");
        for (uint64_t i = 0; i < kv->n; i++) {
            element_text(kv, i, &cursor, v, sizeof v);
            printf("%s%s", i ? ", " : "", v);
        }
        printf("]");
    }
    printf("\n");
}

typedef struct cells {
    char shape[SHAPE_TEXT], size[32];
} cells;

static void tensor_row(void *user, size_t i, const char **out)
{
    const quant_gguf_file *f = ((const void **)user)[0];
    cells *c = ((void **)user)[1];
    const quant_gguf_tensor *t = &f->tensors[i];
    int64_t shape[QUANT_GGUF_MAX_DIMS];
    int rank = quant_gguf_shape(t, shape);
    cli_fmt_shape(rank, shape, c->shape, sizeof c->shape);
    cli_fmt_bytes(t->nbytes, c->size, sizeof c->size);
    out[0] = t->name;
    out[1] = t->traits->ggml_name;
    out[2] = c->shape;
    out[3] = c->size;
}

static void print_text(const quant_gguf_file *f)
{
    char size[32], data[32];
    uint64_t bytes = 0;
    for (size_t i = 0; i < f->n_tensors; i++) bytes += f->tensors[i].nbytes;
    cli_fmt_bytes(f->file_size, size, sizeof size);
    cli_fmt_bytes(bytes, data, sizeof data);
    printf("file: %s (%s, GGUF version %" PRIu32 ", alignment %" PRIu32 ", %zu tensors)\n", f->path,
           size, f->version, f->alignment, f->n_tensors);
    printf("metadata (%zu keys):\n", f->n_kv);
    for (size_t i = 0; i < f->n_kv; i++) print_kv(&f->kv[i]);
    printf("\n");
    static const char *const heads[] = {"NAME", "TYPE", "SHAPE", "SIZE"};
    cells c;
    const void *user[2] = {f, &c};
    cli_print_table(heads, 4, 3, f->n_tensors, tensor_row, (void *)user);
    printf("\n%zu tensor%s, %s of data\n", f->n_tensors, f->n_tensors == 1 ? "" : "s", data);
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static json_t *element_json(const quant_gguf_kv *kv, uint64_t i, size_t *cursor)
{
    int64_t v;
    double d;
    const char *s;
    uint64_t len;
    if (kv->elem == QUANT_GGUF_STRING && quant_gguf_kv_next_string(kv, cursor, &s, &len)) {
        json_t *j = json_stringn(s, (size_t)len);
        return j ? j : json_null(); /* not UTF-8 */
    }
    if (kv->elem == QUANT_GGUF_BOOL && quant_gguf_kv_int(kv, i, &v)) return json_boolean(v);
    if (quant_gguf_kv_int(kv, i, &v)) return json_integer(v);
    if (quant_gguf_kv_float(kv, i, &d) && isfinite(d)) return json_real(d);
    return json_null();
}

static json_t *kv_json(const quant_gguf_kv *kv)
{
    size_t cursor = 0;
    if (kv->type != QUANT_GGUF_ARRAY)
        return json_pack("{s:s, s:o}", "type", quant_gguf_type_name(kv->type), "value",
                         element_json(kv, 0, &cursor));
    json_t *o = json_pack("{s:s, s:s, s:I}", "type", "array", "element_type",
                          quant_gguf_type_name(kv->elem), "length", (json_int_t)kv->n);
    if (!o || kv->n > ARRAY_JSON) return o;
    json_t *values = json_array();
    for (uint64_t i = 0; values && i < kv->n; i++)
        json_array_append_new(values, element_json(kv, i, &cursor));
    json_object_set_new(o, "values", values ? values : json_null());
    return o;
}

static json_t *dims(int n, const int64_t *v)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *tensor_json(const quant_gguf_tensor *t)
{
    int64_t shape[QUANT_GGUF_MAX_DIMS];
    int rank = quant_gguf_shape(t, shape);
    return json_pack("{s:s, s:s, s:i, s:o, s:o, s:I, s:I}", "name", t->name, "ggml_type",
                     t->traits->ggml_name, "ggml_type_id", t->type, "shape", dims(rank, shape),
                     "ne", dims(t->n_dims, t->ne), "offset", (json_int_t)t->offset, "bytes",
                     (json_int_t)t->nbytes);
}

static int print_json(const quant_gguf_file *f)
{
    json_t *meta = json_object(), *tensors = json_array();
    for (size_t i = 0; meta && i < f->n_kv; i++)
        json_object_set_new(meta, f->kv[i].key, kv_json(&f->kv[i]));
    for (size_t i = 0; tensors && i < f->n_tensors; i++)
        json_array_append_new(tensors, tensor_json(&f->tensors[i]));
    json_t *root = json_pack("{s:s, s:s, s:I, s:i, s:i, s:I, s:o, s:o}", "file", f->path, "format",
                             "gguf", "file_size", (json_int_t)f->file_size, "version",
                             (int)f->version, "alignment", (int)f->alignment, "data_start",
                             (json_int_t)f->data_start, "metadata", meta, "tensors", tensors);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return cli_put_text(text);
}

int cli_inspect_gguf(const char *path, bool as_json)
{
    quant_gguf_file *f = NULL;
    quant_ck_error err;
    if (quant_gguf_open(path, &f, &err) != QUANT_CK_OK) return cli_ck_error(&err);
    int rc = CLI_EXIT_OK;
    if (as_json)
        rc = print_json(f);
    else
        print_text(f);
    quant_gguf_close(f);
    if (rc == CLI_EXIT_OK && (fflush(stdout) != 0 || ferror(stdout))) {
        cli_error("write error on standard output");
        rc = CLI_EXIT_FAIL;
    }
    return rc;
}
