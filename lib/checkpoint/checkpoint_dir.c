/* checkpoint_dir.c -- sharded checkpoints: finding and validating the shards of an input
 * directory (model.safetensors.index.json, or every *.safetensors), and building an output
 * directory under a temporary name (shards, rewritten index, the other files copied) that is
 * renamed into place only when complete.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_internal.h"

#define CK_INDEX_MAX (64u << 20)

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%s", dir, name);
    return s;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Shard names in the index, unique, in order of first appearance; validated weight_map. */
static quant_ck_status index_shards(const char *dir, json_t **map, char ***names, size_t *n,
                                    quant_ck_error *err)
{
    char *path = join(dir, CK_INDEX_NAME), *text = NULL;
    quant_ck_status st =
        path ? ck_read_small_file(path, CK_INDEX_MAX, &text, NULL, err) : QUANT_CK_ERR_NOMEM;
    json_error_t je;
    json_t *root = st == QUANT_CK_OK ? json_loads(text, JSON_REJECT_DUPLICATES, &je) : NULL;
    free(text);
    json_t *wm = root ? json_object_get(root, "weight_map") : NULL;
    if (st == QUANT_CK_OK && !json_is_object(wm))
        st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: %s", path,
                           root ? "no \"weight_map\" object" : je.text);
    *names = NULL;
    *n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(st == QUANT_CK_OK ? wm : NULL, key, v)
    {
        const char *file = json_string_value(v);
        if (!file || !ends_with(file, ".safetensors") || strchr(file, '/') || file[0] == '.') {
            st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                               "%s: tensor '%s': shard must be a *.safetensors file name in the "
                               "same directory",
                               path, key);
            break;
        }
        size_t i = 0;
        while (i < *n && strcmp((*names)[i], file) != 0) i++;
        if (i < *n) continue;
        char **grown = realloc(*names, (*n + 1) * sizeof **names);
        if (!grown || !(grown[*n] = strdup(file))) {
            if (grown) *names = grown;
            st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
            break;
        }
        *names = grown;
        (*n)++;
    }
    free(path);
    if (st == QUANT_CK_OK) *map = json_incref(wm);
    json_decref(root);
    return st;
}

/* Every *.safetensors file of `dir`, sorted by name. */
static quant_ck_status glob_shards(const char *dir, char ***names, size_t *n, quant_ck_error *err)
{
    DIR *d = opendir(dir);
    if (!d) return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    *names = NULL;
    *n = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".safetensors")) continue;
        char **grown = realloc(*names, (*n + 1) * sizeof **names);
        if (!grown) break;
        *names = grown;
        if (!(grown[*n] = strdup(e->d_name))) break;
        (*n)++;
    }
    bool complete = e == NULL;
    closedir(d);
    if (!complete) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    if (*n == 0)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: no *.safetensors files and no %s", dir,
                             CK_INDEX_NAME);
    qsort(*names, *n, sizeof **names, cmp_str);
    return QUANT_CK_OK;
}

/* Every weight_map entry must be a tensor of the shard it names, and every tensor listed. */
static quant_ck_status check_index(const ck_shards *s, char **names, json_t *map,
                                   quant_ck_error *err)
{
    size_t listed = 0;
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v)
    {
        size_t i = 0;
        while (strcmp(names[i], json_string_value(v)) != 0) i++;
        if (!quant_st_find(s->f[i], key))
            return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: tensor '%s' is not in %s",
                                 CK_INDEX_NAME, key, names[i]);
        listed++;
    }
    size_t total = 0;
    for (size_t i = 0; i < s->n; i++) total += s->f[i]->n_tensors;
    if (total != listed)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s lists %zu tensors but its shards hold %zu", CK_INDEX_NAME, listed,
                             total);
    return QUANT_CK_OK;
}

static quant_ck_status open_dir(const char *in, ck_shards *s, quant_ck_error *err)
{
    char *ipath = join(in, CK_INDEX_NAME);
    struct stat sb;
    s->had_index = ipath && stat(ipath, &sb) == 0;
    free(ipath);
    json_t *map = NULL;
    char **names = NULL;
    size_t n = 0;
    quant_ck_status st =
        s->had_index ? index_shards(in, &map, &names, &n, err) : glob_shards(in, &names, &n, err);
    if (st == QUANT_CK_OK && n == 0)
        st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s/%s: empty weight_map", in, CK_INDEX_NAME);
    s->f = st == QUANT_CK_OK ? calloc(n, sizeof *s->f) : NULL;
    if (st == QUANT_CK_OK && !s->f) st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == QUANT_CK_OK && i < n; i++) {
        char *path = join(in, names[i]);
        st = path ? quant_st_open(path, &s->f[i], err) : QUANT_CK_ERR_NOMEM;
        free(path);
        if (st == QUANT_CK_OK) s->n++;
    }
    if (st == QUANT_CK_OK && map) st = check_index(s, names, map, err);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    json_decref(map);
    return st;
}

quant_ck_status ck_shards_open(const char *in, ck_shards *s, quant_ck_error *err)
{
    memset(s, 0, sizeof *s);
    struct stat sb;
    if (stat(in, &sb) != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", in, strerror(errno));
    s->is_dir = S_ISDIR(sb.st_mode);
    quant_ck_status st;
    if (s->is_dir) {
        st = open_dir(in, s, err);
    } else {
        s->f = calloc(1, sizeof *s->f);
        st = s->f ? quant_st_open(in, &s->f[0], err)
                  : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        if (st == QUANT_CK_OK) s->n = 1;
    }
    if (st != QUANT_CK_OK) ck_shards_close(s);
    return st;
}

void ck_shards_close(ck_shards *s)
{
    for (size_t i = 0; i < s->n; i++) quant_st_close(s->f[i]);
    free(s->f);
    memset(s, 0, sizeof *s);
}

quant_ck_status ck_check_output(const char *out, bool dir, quant_ck_error *err)
{
    struct stat sb;
    if (stat(out, &sb) != 0) {
        if (errno == ENOENT) return QUANT_CK_OK;
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", out, strerror(errno));
    }
    if (dir && S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(out);
        struct dirent *e;
        bool empty = d != NULL;
        while (d && (e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) empty = false;
        if (d) closedir(d);
        if (empty) return QUANT_CK_OK;
    }
    return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: output already exists (remove it first)", out);
}
