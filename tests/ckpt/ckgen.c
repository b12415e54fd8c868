/* ckgen.c -- builds valid safetensors files for the checkpoint suites without the library's
 * writer (so a writer bug cannot hide itself), and deterministic test data.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckutil.h"

void ck_gen_file(const char *path, const ck_gen_tensor *t, size_t n, const char *meta_json)
{
    json_t *root = json_object();
    if (meta_json) {
        json_error_t je;
        json_t *meta = json_loads(meta_json, 0, &je);
        ck_assert_msg(meta != NULL, "bad metadata JSON: %s", je.text);
        json_object_set_new(root, "__metadata__", meta);
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int a = 0; a < t[i].rank; a++)
            json_array_append_new(shape, json_integer(t[i].shape[a]));
        json_object_set_new(root, t[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", t[i].dtype, "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + t[i].nbytes)));
        off += t[i].nbytes;
    }
    char *header = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    char *data = malloc(off ? off : 1);
    ck_assert_ptr_nonnull(data);
    off = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].nbytes) memcpy(data + off, t[i].data, t[i].nbytes);
        off += t[i].nbytes;
    }
    ck_write_st(path, header, data, off);
    free(header);
    free(data);
}

void ck_fill(float *x, size_t n, uint64_t seed, float s)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        float sum = 0;
        for (int k = 0; k < 4; k++) {
            z += 0x9e3779b97f4a7c15ull;
            uint64_t v = z;
            v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
            v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
            v ^= v >> 31;
            sum += (float)(v >> 40) / (float)(1u << 24) - 0.5f;
        }
        x[i] = sum * s;
    }
}
