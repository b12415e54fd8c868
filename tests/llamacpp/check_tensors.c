/* check_tensors.c -- llamacpp-tensors LIBDIR FILE.gguf FILE.safetensors [TYPE]: proves that
 * ggml's own GGUF reader (gguf_init_from_file in libggml-base, reading the tensors' data into a
 * ggml context as well) accepts a file quantd wrote, and that ggml's own dequantization of every
 * tensor (ggml_get_type_traits(type)->to_float) equals, bit for bit, the F32 tensor of the same
 * name that `quant dequantize` wrote from the same file. With TYPE (a ggml type name), at least one
 * tensor must have that type. Prints one line; exits 0 when everything holds, 1 with the file,
 * tensor, type and first differing element otherwise.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ggml_abi.h"
#include "quant_st.h"

#define GGML_F32 0

typedef struct job {
    lc_api api;
    const char *gguf_path, *st_path, *expect;
    struct gguf_context *g;
    struct ggml_context *data; /* every tensor, as ggml read it */
    quant_st_file *st;
    float *ours, *theirs;
    int64_t n_expect;
} job;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    return -1;
}

/* Whether the safetensors shape is ggml's ne reversed (ne past the rank being 1). */
static bool same_shape(const quant_st_tensor *t, const int64_t *ne)
{
    if (t->rank > LC_GGML_MAX_DIMS) return false;
    for (int d = 0; d < LC_GGML_MAX_DIMS; d++) {
        int64_t want = d < t->rank ? t->shape[t->rank - 1 - d] : 1;
        if (ne[d] != want) return false;
    }
    return true;
}

/* ggml's floats for tensor `id` (n elements, `size` bytes) into j->theirs. */
static int ggml_floats(job *j, int64_t id, const lc_type_traits *tr, int64_t n, size_t size)
{
    const char *name = j->api.gguf_get_tensor_name(j->g, id);
    const struct ggml_tensor *t = j->api.ggml_get_tensor(j->data, name);
    if (!t || j->api.ggml_nbytes(t) != size)
        return fail("%s: tensor '%s': not in ggml's context with its %zu bytes", j->gguf_path, name,
                    size);
    const void *bytes = j->api.ggml_get_data(t);
    if (tr->to_float)
        tr->to_float(bytes, j->theirs, n);
    else if (j->api.gguf_get_tensor_type(j->g, id) == GGML_F32)
        memcpy(j->theirs, bytes, size);
    else
        return fail("%s: tensor '%s': ggml has no to_float for type %s", j->gguf_path, name,
                    tr->type_name);
    return 0;
}

static int check_one(job *j, int64_t id)
{
    const char *name = j->api.gguf_get_tensor_name(j->g, id);
    int type = j->api.gguf_get_tensor_type(j->g, id);
    const int64_t *ne = j->api.gguf_get_tensor_ne(j->g, id);
    const lc_type_traits *tr = j->api.ggml_get_type_traits(type);
    int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
    size_t size = j->api.gguf_get_tensor_size(j->g, id);
    if (size != (size_t)(n / tr->blck_size) * tr->type_size)
        return fail("%s: tensor '%s' (%s): %zu bytes for %" PRId64 " elements", j->gguf_path, name,
                    tr->type_name, size, n);
    if (j->expect && !strcasecmp(tr->type_name, j->expect)) j->n_expect++;
    const quant_st_tensor *t = quant_st_find(j->st, name);
    if (!t) return fail("%s: tensor '%s' (%s) is missing", j->st_path, name, tr->type_name);
    if (t->dtype != QUANT_ST_F32 || !same_shape(t, ne))
        return fail("%s: tensor '%s' (%s): not F32 of ggml's shape reversed", j->st_path, name,
                    tr->type_name);
    free(j->ours);
    free(j->theirs);
    j->ours = malloc((size_t)n * sizeof(float) + 1);
    j->theirs = malloc((size_t)n * sizeof(float) + 1);
    if (!j->ours || !j->theirs) return fail("%s: out of memory", j->gguf_path);
    quant_ck_error err;
    if (quant_st_read(j->st, t, 0, j->ours, (size_t)n * sizeof(float), &err) != QUANT_CK_OK)
        return fail("%s", err.message);
    if (ggml_floats(j, id, tr, n, size)) return -1;
    for (int64_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &j->theirs[i], 4);
        memcpy(&b, &j->ours[i], 4);
        if (a != b)
            return fail("%s: tensor '%s' (%s): element %" PRId64 " (row %" PRId64
                        ", column %" PRId64 "): ggml %.9g (0x%08x), quant dequantize %.9g (0x%08x)",
                        j->gguf_path, name, tr->type_name, i, i / ne[0], i % ne[0], j->theirs[i], a,
                        j->ours[i], b);
    }
    return 0;
}

static int run(job *j, const char *libdir)
{
    char msg[512];
    if (lc_load(&j->api, libdir, false, msg, sizeof msg)) return fail("%s", msg);
    lc_gguf_init_params p = {.no_alloc = false, .ctx = &j->data};
    if (!(j->g = j->api.gguf_init_from_file(j->gguf_path, p)))
        return fail("%s: ggml's gguf_init_from_file refuses it", j->gguf_path);
    quant_ck_error err;
    if (quant_st_open(j->st_path, &j->st, &err) != QUANT_CK_OK) return fail("%s", err.message);
    int64_t n = j->api.gguf_get_n_tensors(j->g);
    if (n != (int64_t)j->st->n_tensors)
        return fail("%s: %" PRId64 " tensors, %s: %zu", j->gguf_path, n, j->st_path,
                    j->st->n_tensors);
    for (int64_t id = 0; id < n; id++)
        if (check_one(j, id)) return -1;
    if (j->expect && !j->n_expect)
        return fail("%s: no tensor has type %s", j->gguf_path, j->expect);
    printf("ok %s: ggml reads its %" PRId64 " tensors%s%s%s, each bit-identical to quant "
           "dequantize\n",
           j->gguf_path, n, j->expect ? " (" : "", j->expect ? j->expect : "",
           j->expect ? " among them)" : "");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s LIBDIR FILE.gguf FILE.safetensors [TYPE]\n", argv[0]);
        return 2;
    }
    job j = {.gguf_path = argv[2], .st_path = argv[3], .expect = argc == 5 ? argv[4] : NULL};
    int rc = run(&j, argv[1]);
    free(j.ours);
    free(j.theirs);
    quant_st_close(j.st);
    if (j.data) j.api.ggml_free(j.data);
    if (j.g) j.api.gguf_free(j.g);
    if (j.api.base) lc_unload(&j.api);
    return rc ? 1 : 0;
}
