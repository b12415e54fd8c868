/* outdir.c -- an output checkpoint directory built under a temporary name beside its final
 * name: shards written into it, the index rewritten for the output tensor names, the input's
 * other files copied, then one rename publishes it.
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

char *ck_outdir_path(const ck_outdir *d, const char *name)
{
    size_t n = strlen(d->tmp) + strlen(name) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%s", d->tmp, name);
    return s;
}

quant_ck_status ck_outdir_begin(const char *out, ck_outdir *d, quant_ck_error *err)
{
    memset(d, 0, sizeof *d);
    size_t n = strlen(out) + 24;
    d->tmp = malloc(n);
    d->weight_map = json_object();
    if (!d->tmp || !d->weight_map) {
        ck_outdir_free(d);
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') len--;
    snprintf(d->tmp, n, "%.*s.partial-XXXXXX", (int)len, out);
    if (!mkdtemp(d->tmp) || chmod(d->tmp, 0755) != 0) { /* mkdtemp's 0700; files are 0644 */
        quant_ck_status st = quant_ck_fail(err, QUANT_CK_ERR_IO,
                                           "%.*s: cannot create the temporary directory %s: %s",
                                           (int)len, out, d->tmp, strerror(errno));
        free(d->tmp);
        d->tmp = NULL;
        ck_outdir_free(d);
        return st;
    }
    return QUANT_CK_OK;
}

quant_ck_status ck_outdir_add_shard(ck_outdir *d, const char *shard, const quant_st_out_tensor *t,
                                    size_t n, quant_ck_error *err)
{
    for (size_t i = 0; i < n; i++) {
        int64_t numel = quant_numel(t[i].rank, t[i].shape);
        d->total_size += (uint64_t)numel * (uint64_t)quant_st_dtype_bits(t[i].dtype) / 8;
        if (json_object_set_new(d->weight_map, t[i].name, json_string(shard)) != 0)
            return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    return QUANT_CK_OK;
}

static bool is_shard(const ck_shards *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(ck_basename(s->f[i]->path), name) == 0) return true;
    return false;
}

/* Regular files of the input other than shards and the index; config.json maybe replaced. */
static quant_ck_status copy_others(ck_outdir *d, const char *in_dir, const ck_shards *s,
                                   const char *config_text, quant_ck_error *err)
{
    DIR *dir = opendir(in_dir);
    if (!dir) return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", in_dir, strerror(errno));
    quant_ck_status st = QUANT_CK_OK;
    struct dirent *e;
    while (st == QUANT_CK_OK && (e = readdir(dir)) != NULL) {
        const char *name = e->d_name;
        if (name[0] == '.' || is_shard(s, name) || strcmp(name, CK_INDEX_NAME) == 0) continue;
        if (config_text && strcmp(name, "config.json") == 0) continue;
        if (strcmp(name, "quant-report.json") == 0) continue; /* describes the run that wrote it */
        size_t n = strlen(in_dir) + strlen(name) + 2;
        char *from = malloc(n), *to = ck_outdir_path(d, name);
        struct stat sb;
        if (from) snprintf(from, n, "%s/%s", in_dir, name);
        if (!from || !to)
            st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        else if (stat(from, &sb) == 0 && S_ISREG(sb.st_mode))
            st = ck_copy_file(from, to, err);
        free(from);
        free(to);
    }
    closedir(dir);
    if (st == QUANT_CK_OK && config_text) {
        char *to = ck_outdir_path(d, "config.json");
        st = to ? ck_write_file_atomic(to, config_text, strlen(config_text), err)
                : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        free(to);
    }
    return st;
}

static quant_ck_status write_index(ck_outdir *d, quant_ck_error *err)
{
    json_t *root = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)d->total_size,
                             "weight_map", (json_t *)d->weight_map);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    char *path = ck_outdir_path(d, CK_INDEX_NAME);
    quant_ck_status st = text && path ? ck_write_file_atomic(path, text, strlen(text), err)
                                      : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    free(text);
    free(path);
    json_decref(root);
    return st;
}

quant_ck_status ck_outdir_finish(ck_outdir *d, const char *in_dir, const ck_shards *s,
                                 const char *config_text, const char *out, quant_ck_error *err)
{
    quant_ck_status st = copy_others(d, in_dir, s, config_text, err);
    if (st == QUANT_CK_OK && (s->had_index || s->n > 1)) st = write_index(d, err);
    if (st != QUANT_CK_OK) return st;
    rmdir(out); /* ck_check_output allowed only a missing or empty directory */
    if (rename(d->tmp, out) != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: cannot rename into place: %s", out,
                             strerror(errno));
    ck_fsync_parent(out);
    free(d->tmp);
    d->tmp = NULL; /* published: nothing to remove */
    return QUANT_CK_OK;
}

void ck_outdir_free(ck_outdir *d)
{
    if (d->tmp) ck_remove_tree(d->tmp);
    free(d->tmp);
    json_decref(d->weight_map);
    memset(d, 0, sizeof *d);
}
