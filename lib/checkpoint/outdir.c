/* outdir.c -- an output checkpoint directory built under a temporary name beside its final
 * name (OUT.quant-partial-PID-XXXXXX, locked while it lives): shards written into it, the index
 * rewritten for the output tensor names, the input's other files copied (checked beforehand: no
 * link among them when the input refuses links), then one rename publishes it (over nothing or an
 * empty directory: never a link). Each file it writes is recorded in the run's report, with its
 * SHA-256 (taken from the bytes written) when the run asks for it.
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
    d->lock_fd = -1;
    if (!(d->weight_map = json_object())) {
        ck_outdir_free(d);
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    quant_ck_status st = ck_temp_dir(out, &d->tmp, &d->lock_fd, err);
    if (st != QUANT_CK_OK) ck_outdir_free(d);
    return st;
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

/* Records file `name` of `bytes` (its SHA-256 `hex` when the run hashes) in the report. */
static quant_ck_status record(const ck_outdir *d, const char *name, uint64_t bytes, const char *hex,
                              quant_ck_error *err)
{
    if (ck_report_add_output(d->report, name, bytes, d->sha256 ? hex : NULL)) return QUANT_CK_OK;
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

/* Writes `text` as file `name` of the directory (atomically), recorded. */
static quant_ck_status put_text(const ck_outdir *d, const char *name, const char *text,
                                quant_ck_error *err)
{
    char *path = ck_outdir_path(d, name), hex[65] = "";
    size_t len = strlen(text);
    quant_ck_status st =
        path ? ck_write_file_atomic_sha(path, text, len, d->sha256 ? hex : NULL, err)
             : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    free(path);
    return st == QUANT_CK_OK ? record(d, name, len, hex, err) : st;
}

static bool is_shard(const ck_shards *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(ck_basename(s->f[i]->path), name) == 0) return true;
    return false;
}

/* Whether entry `name` of the input directory is one of the other files to copy: not hidden,
 * not a shard, the index, the report or a replaced config.json, and a regular file (followed
 * when the input follows links). A link is refused when it does not; anything else that is not
 * a regular file (a directory, a FIFO, a socket, a device) is skipped unopened. The copy itself
 * opens the file under the directory and checks its type again on the descriptor. */
static quant_ck_status other_file(const ck_shards *s, const char *name, bool config_replaced,
                                  bool *copy, quant_ck_error *err)
{
    *copy = false;
    if (name[0] == '.' || is_shard(s, name) || strcmp(name, CK_INDEX_NAME) == 0) return QUANT_CK_OK;
    if (config_replaced && strcmp(name, "config.json") == 0) return QUANT_CK_OK;
    if (strcmp(name, "quant-report.json") == 0) return QUANT_CK_OK; /* describes its own run */
    struct stat sb;
    if (!ck_stat_in(&s->dir, name, &sb)) return QUANT_CK_OK; /* gone, or a dangling link */
    if (S_ISLNK(sb.st_mode))
        return ck_fail_in(err, QUANT_CK_ERR_ACCESS, &s->dir, name, CK_LINK_REFUSED);
    *copy = S_ISREG(sb.st_mode);
    return QUANT_CK_OK;
}

/* Goes over the other files of the input directory; copies them into `d` (NULL: checks only). */
static quant_ck_status each_other(ck_outdir *d, const ck_shards *s, bool config_replaced,
                                  quant_ck_error *err)
{
    DIR *dir = ck_opendir_fd(s->dir.fd);
    if (!dir) return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", s->dir.shown, strerror(errno));
    quant_ck_status st = QUANT_CK_OK;
    struct dirent *e;
    while (st == QUANT_CK_OK && (e = readdir(dir)) != NULL) {
        bool copy;
        st = other_file(s, e->d_name, config_replaced, &copy, err);
        if (st != QUANT_CK_OK || !copy || !d) continue;
        char *to = ck_outdir_path(d, e->d_name), hex[65] = "";
        uint64_t bytes = 0;
        st = to ? ck_copy_in_sha(&s->dir, e->d_name, to, d->sha256 ? hex : NULL, &bytes, err)
                : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        free(to);
        if (st == QUANT_CK_OK) st = record(d, e->d_name, bytes, hex, err);
    }
    closedir(dir);
    return st;
}

quant_ck_status ck_outdir_check_others(const ck_shards *s, bool config_replaced,
                                       quant_ck_error *err)
{
    return each_other(NULL, s, config_replaced, err);
}

/* The other files copied; config.json written from `config_text` when not NULL. */
static quant_ck_status copy_others(ck_outdir *d, const ck_shards *s, const char *config_text,
                                   quant_ck_error *err)
{
    quant_ck_status st = each_other(d, s, config_text != NULL, err);
    if (st == QUANT_CK_OK && config_text) st = put_text(d, "config.json", config_text, err);
    return st;
}

static quant_ck_status write_index(ck_outdir *d, quant_ck_error *err)
{
    json_t *root = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)d->total_size,
                             "weight_map", (json_t *)d->weight_map);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    quant_ck_status st = text ? put_text(d, CK_INDEX_NAME, text, err)
                              : quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    free(text);
    json_decref(root);
    return st;
}

quant_ck_status ck_outdir_finish(ck_outdir *d, const ck_shards *s, const char *config_text,
                                 const char *out, quant_ck_error *err)
{
    quant_ck_status st = copy_others(d, s, config_text, err);
    if (st == QUANT_CK_OK && (s->had_index || s->n > 1)) st = write_index(d, err);
    if (st != QUANT_CK_OK) return st;
    st = ck_publish(d->tmp, out, CK_TARGET_EMPTY_DIR, err); /* nothing, or an empty directory */
    if (st != QUANT_CK_OK) return st;
    ck_fsync_parent(out);
    free(d->tmp);
    d->tmp = NULL; /* published: nothing to remove */
    if (d->lock_fd >= 0) close(d->lock_fd);
    d->lock_fd = -1;
    return QUANT_CK_OK;
}

void ck_outdir_free(ck_outdir *d)
{
    if (d->tmp) ck_remove_tree(d->tmp); /* then the lock: never unlocked under its name */
    if (d->lock_fd >= 0) close(d->lock_fd);
    free(d->tmp);
    json_decref(d->weight_map);
    memset(d, 0, sizeof *d);
}
