/* checkpoint_dir.c -- sharded checkpoints: opening the input (a file or a directory, under the
 * caller's directory descriptor), finding and validating the shards of an input directory
 * (model.safetensors.index.json, or every *.safetensors), each opened under the directory's
 * descriptor (with inputs still arriving, each shard read as far as the wait confirms, the
 * index waited for whole), no tensor name in two of them, and checking that the output name is
 * free.
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
static quant_ck_status index_shards(const ck_dir *dir, json_t **map, char ***names, size_t *n,
                                    quant_ck_error *err)
{
    char *path = ck_shown_name(dir, CK_INDEX_NAME), *text = NULL;
    quant_ck_status st = path ? ck_read_small_in(dir, CK_INDEX_NAME, CK_INDEX_MAX, &text, NULL, err)
                              : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    json_error_t je;
    json_t *root = st == QUANT_CK_OK ? json_loads(text, JSON_REJECT_DUPLICATES, &je) : NULL;
    json_t *wm = root ? json_object_get(root, "weight_map") : NULL;
    char why[256];
    if (st == QUANT_CK_OK && !json_is_object(wm))
        st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: %s", path,
                           root ? "no \"weight_map\" object"
                                : quant_json_error_text(text, strlen(text), je.position, je.text,
                                                        why, sizeof why));
    free(text);
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

/* Every *.safetensors name of `dir`'s listing, sorted (opened as shards later: a link or a
 * non-regular file among them fails then). */
static quant_ck_status glob_shards(const ck_dir *dir, char ***names, size_t *n, quant_ck_error *err)
{
    DIR *d = ck_opendir_fd(dir->fd);
    if (!d) return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", dir->shown, strerror(errno));
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
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: no *.safetensors files and no %s",
                             dir->shown, CK_INDEX_NAME);
    qsort(*names, *n, sizeof **names, cmp_str);
    return QUANT_CK_OK;
}

/* The first tensor of the shards that `map` does not list (its shard into *shard), and how many
 * are unlisted; NULL when every one is. */
static const char *first_unlisted(const ck_shards *s, const json_t *map, size_t *shard,
                                  size_t *count)
{
    const char *first = NULL;
    *count = 0;
    for (size_t k = 0; k < s->n; k++)
        for (size_t i = 0; i < s->f[k]->n_tensors; i++) {
            const char *name = s->f[k]->tensors[i].name;
            if (json_object_get(map, name)) continue;
            if (!first) {
                first = name;
                *shard = k;
            }
            ++*count;
        }
    return first;
}

/* Every weight_map entry must be a tensor of the shard it names, and every tensor listed. */
static quant_ck_status check_index(const ck_shards *s, char **names, json_t *map,
                                   quant_ck_error *err)
{
    size_t listed = 0;
    const char *key;
    json_t *v;
    char shown[CK_SHORT_MAX];
    json_object_foreach(map, key, v)
    {
        size_t i = 0;
        while (strcmp(names[i], json_string_value(v)) != 0) i++;
        if (!quant_st_find(s->f[i], key))
            return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s/%s: tensor '%s' is not in %s",
                                 s->dir.shown, CK_INDEX_NAME,
                                 ck_short_text(key, shown, sizeof shown), names[i]);
        listed++;
    }
    size_t total = 0, shard = 0, unlisted = 0;
    for (size_t i = 0; i < s->n; i++) total += s->f[i]->n_tensors;
    if (total == listed) return QUANT_CK_OK;
    const char *missing = first_unlisted(s, map, &shard, &unlisted);
    if (!missing) /* the counts differ only if some tensor is unlisted; kept for safety */
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s/%s lists %zu tensors but its shards hold %zu", s->dir.shown,
                             CK_INDEX_NAME, listed, total);
    char more[48] = "";
    if (unlisted > 1) snprintf(more, sizeof more, " (and %zu more)", unlisted - 1);
    return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                         "%s/%s lists %zu tensors but its shards hold %zu: tensor '%s' of %s is "
                         "not in its weight_map%s; add it to the index, or remove it from the "
                         "shard",
                         s->dir.shown, CK_INDEX_NAME, listed, total,
                         ck_short_text(missing, shown, sizeof shown),
                         ck_basename(s->f[shard]->path), more);
}

/* No tensor name in two shards: the output index could map it to only one of them, and an index
 * naming one shard for it would hide the other copy. */
static quant_ck_status check_unique(const ck_shards *s, quant_ck_error *err)
{
    json_t *seen = json_object(); /* name -> shard */
    quant_ck_status st =
        seen ? QUANT_CK_OK : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t k = 0; st == QUANT_CK_OK && k < s->n; k++)
        for (size_t i = 0; st == QUANT_CK_OK && i < s->f[k]->n_tensors; i++) {
            const char *name = s->f[k]->tensors[i].name;
            const json_t *prev = json_object_get(seen, name);
            if (prev)
                st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                                   "%s: tensor '%s' is in two shards, %s and %s (a tensor must be "
                                   "in one shard only)",
                                   s->dir.shown, name,
                                   ck_basename(s->f[json_integer_value(prev)]->path),
                                   ck_basename(s->f[k]->path));
            else if (json_object_set_new(seen, name, json_integer((json_int_t)k)) != 0)
                st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        }
    json_decref(seen);
    return st;
}

/* Shard `name` of the directory, opened under it. */
static quant_ck_status open_shard(const ck_dir *dir, const char *name, quant_st_file **f,
                                  quant_ck_error *err)
{
    char *shown = ck_shown_name(dir, name);
    if (!shown) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    int fd;
    quant_ck_status st = ck_open_in(dir, name, CK_KIND_REG, &fd, NULL, err);
    if (st == QUANT_CK_OK)
        st = dir->wait ? ck_st_open_growing(fd, shown, dir->wait, f, err)
                       : quant_st_open_fd(fd, shown, f, err);
    free(shown);
    return st;
}

static quant_ck_status open_dir(ck_shards *s, quant_ck_error *err)
{
    struct stat sb; /* the index, when present, is read (a link to it refused then) */
    s->had_index = ck_stat_in(&s->dir, CK_INDEX_NAME, &sb);
    json_t *map = NULL;
    char **names = NULL;
    size_t n = 0;
    quant_ck_status st = s->had_index ? index_shards(&s->dir, &map, &names, &n, err)
                                      : glob_shards(&s->dir, &names, &n, err);
    if (st == QUANT_CK_OK && n == 0)
        st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s/%s: empty weight_map", s->dir.shown,
                           CK_INDEX_NAME);
    s->f = st == QUANT_CK_OK ? calloc(n, sizeof *s->f) : NULL;
    if (st == QUANT_CK_OK && !s->f) st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == QUANT_CK_OK && i < n; i++) {
        st = open_shard(&s->dir, names[i], &s->f[i], err);
        if (st == QUANT_CK_OK) s->n++;
    }
    if (st == QUANT_CK_OK) st = check_unique(s, err);
    if (st == QUANT_CK_OK && map) st = check_index(s, names, map, err);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    json_decref(map);
    return st;
}

quant_ck_status ck_shards_open(const ck_dir *base, const char *in, ck_shards *s,
                               quant_ck_error *err)
{
    memset(s, 0, sizeof *s);
    s->dir.fd = -1;
    int fd;
    struct stat sb;
    quant_ck_status st = ck_open_in(base, in, CK_KIND_ANY, &fd, &sb, err);
    if (st != QUANT_CK_OK) return st;
    s->is_dir = S_ISDIR(sb.st_mode);
    if (s->is_dir) {
        s->dir = (ck_dir){.fd = fd, .shown = in, .nofollow = base->nofollow, .wait = base->wait};
        st = open_dir(s, err);
    } else {
        s->f = calloc(1, sizeof *s->f);
        if (!s->f) close(fd);
        st = !s->f        ? quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory")
             : base->wait ? ck_st_open_growing(fd, in, base->wait, &s->f[0], err)
                          : quant_st_open_fd(fd, in, &s->f[0], err);
        if (st == QUANT_CK_OK) s->n = 1;
    }
    if (st != QUANT_CK_OK) ck_shards_close(s);
    return st;
}

void ck_shards_close(ck_shards *s)
{
    for (size_t i = 0; i < s->n; i++) quant_st_close(s->f[i]);
    free(s->f);
    if (s->is_dir && s->dir.fd >= 0) close(s->dir.fd);
    memset(s, 0, sizeof *s);
    s->dir.fd = -1;
}

quant_ck_status ck_check_output(const char *out, bool dir, quant_ck_error *err)
{
    return ck_check_target(out, dir ? CK_TARGET_EMPTY_DIR : CK_TARGET_NEW, err);
}
