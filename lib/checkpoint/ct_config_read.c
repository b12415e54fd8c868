/* ct_config_read.c -- compressed-tensors' `quantization_config` read back from a config.json
 * (quant_ct_config_parse): each config group's format (its own "format", else the top-level
 * one), weights num_bits and targets, refused whole when a format is one the reader does not
 * decode; the group of a module; config.json beside a shard; and config.json without it for a
 * dequantized checkpoint.
 * The writer is ct_config.c.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_internal.h"
#include "ct_read.h"

/* The formats the reader decodes, and the forms of the tensors each may hold. */
static const struct {
    const char *name;
    unsigned forms; /* bit per quant_ct_form */
} known_formats[] = {
    {"pack-quantized", 1u << QUANT_CT_PACK32},
    {"int-quantized", 1u << QUANT_CT_INT8},
    {"naive-quantized", (1u << QUANT_CT_INT8) | (1u << QUANT_CT_FP8)},
    {"float-quantized", 1u << QUANT_CT_FP8},
    {"nvfp4-pack-quantized", 1u << QUANT_CT_NVFP4},
    {"mxfp4-pack-quantized", 1u << QUANT_CT_MXFP4},
    {"mxfp8-quantized", 1u << QUANT_CT_MXFP8},
};

#define N_KNOWN (sizeof known_formats / sizeof known_formats[0])

/* The widest weights.num_bits a group may state (compressed-tensors' widest type: 64-bit). */
#define CT_NUM_BITS_MAX 64

struct quant_ct_config {
    json_t *root; /* the parsed config.json the groups point into */
    size_t n;
    ct_group *groups;
};

static const char *known_list(void)
{
    return "pack-quantized, int-quantized, naive-quantized, float-quantized, "
           "nvfp4-pack-quantized, mxfp4-pack-quantized, mxfp8-quantized";
}

static int format_index(const char *name)
{
    for (size_t i = 0; name && i < N_KNOWN; i++)
        if (strcmp(known_formats[i].name, name) == 0) return (int)i;
    return -1;
}

bool ct_format_holds(const char *format, quant_ct_form form)
{
    int i = format_index(format);
    return i >= 0 && (known_formats[i].forms & (1u << form));
}

/* `targets`' first entry and how many more, for messages ("" when there are none). */
static void targets_desc(const json_t *targets, char *buf, size_t cap)
{
    const char *first = json_string_value(json_array_get(targets, 0));
    size_t more = json_array_size(targets) ? json_array_size(targets) - 1 : 0;
    if (!first)
        buf[0] = '\0';
    else if (more)
        snprintf(buf, cap, " (targets '%.200s' and %zu more)", first, more);
    else
        snprintf(buf, cap, " (targets '%.200s')", first);
}

static quant_ck_status bad_format(const char *path, const char *group, const json_t *targets,
                                  const char *format, quant_ck_error *err)
{
    char t[256];
    targets_desc(targets, t, sizeof t);
    return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                         "%s: quantization_config group '%s'%s: format '%s' is not one quant "
                         "dequantize reads (%s)",
                         path, group, t, format, known_list());
}

static quant_ck_status parse_group(ct_group *g, const char *key, json_t *grp, const char *top,
                                   const char *version, const char *path, quant_ck_error *err)
{
    if (!json_is_object(grp))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: quantization_config group '%s' is not an object", path, key);
    json_t *f = json_object_get(grp, "format");
    g->name = key;
    g->version = version;
    g->format = json_is_string(f) ? json_string_value(f) : top;
    g->targets = json_object_get(grp, "targets");
    json_t *w = json_object_get(grp, "weights");
    json_t *bits = json_object_get(w, "num_bits");
    json_int_t b = json_integer_value(bits);
    /* checked before the cast: a huge value must not wrap into a width the reader decodes */
    if (bits && !json_is_null(bits) && (!json_is_integer(bits) || b < 1 || b > CT_NUM_BITS_MAX))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: quantization_config group '%s': weights.num_bits is not an "
                             "integer from 1 to %d",
                             path, key, CT_NUM_BITS_MAX);
    g->bits = (int)b;
    if (!g->format || strcmp(g->format, "mixed-precision") == 0)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: quantization_config group '%s' has no format of its own (the "
                             "top level says %s)",
                             path, key, top ? top : "none");
    if (format_index(g->format) < 0) return bad_format(path, key, g->targets, g->format, err);
    return QUANT_CK_OK;
}

static quant_ck_status parse_qc(quant_ct_config *c, json_t *qc, const char *path,
                                quant_ck_error *err)
{
    const char *top = json_string_value(json_object_get(qc, "format"));
    const char *version = json_string_value(json_object_get(qc, "version"));
    const char *status = json_string_value(json_object_get(qc, "quantization_status"));
    if (status && strcmp(status, "compressed") != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "%s: quantization_status '%s': only a compressed checkpoint holds "
                             "codes to decode (its weights are float already)",
                             path, status);
    if (top && strcmp(top, "dense") != 0 && strcmp(top, "mixed-precision") != 0 &&
        format_index(top) < 0)
        return bad_format(path, "(top level)", NULL, top, err);
    json_t *groups = json_object_get(qc, "config_groups");
    if (groups && !json_is_object(groups))
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: quantization_config.config_groups is not an object", path);
    c->groups = calloc(json_object_size(groups) + 1, sizeof *c->groups);
    if (!c->groups) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *grp;
    json_object_foreach(groups, key, grp)
    {
        quant_ck_status st = parse_group(&c->groups[c->n], key, grp, top, version, path, err);
        if (st != QUANT_CK_OK) return st;
        c->n++;
    }
    return QUANT_CK_OK;
}

quant_ck_status quant_ct_config_parse(const char *text, const char *path, quant_ct_config **out,
                                      quant_ck_error *err)
{
    if (!out || !text) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    *out = NULL;
    path = path ? path : "config.json";
    json_error_t je;
    json_t *root = json_loads(text, 0, &je);
    json_t *qc = json_object_get(root, "quantization_config"); /* NULL unless an object */
    const char *method = json_string_value(json_object_get(qc, "quant_method"));
    if (!method || strcmp(method, "compressed-tensors") != 0) {
        json_decref(root);
        return QUANT_CK_OK;
    }
    quant_ct_config *c = calloc(1, sizeof *c);
    if (!c) {
        json_decref(root);
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    c->root = root;
    quant_ck_status st = parse_qc(c, qc, path, err);
    if (st != QUANT_CK_OK) {
        quant_ct_config_free(c);
        return st;
    }
    *out = c;
    return QUANT_CK_OK;
}

/* The text of the regular file `path` (NULL and QUANT_CK_OK when there is none). Opened
 * non-blocking and checked by its descriptor: a FIFO or device named config.json (a downloaded
 * archive may hold one) is refused instead of waiting forever for a writer. */
static quant_ck_status read_text(const char *path, char **text, quant_ck_error *err)
{
    *text = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return QUANT_CK_OK;
    if (fd < 0) return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    quant_ck_status st = QUANT_CK_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > (off_t)CK_CONFIG_MAX)
        st = quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: not a regular file of at most %u MiB", path,
                           CK_CONFIG_MAX >> 20);
    size_t n = st == QUANT_CK_OK ? (size_t)sb.st_size : 0, got = 0;
    if (st == QUANT_CK_OK && !(*text = malloc(n + 1)))
        st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    while (st == QUANT_CK_OK && got < n) {
        ssize_t r = read(fd, *text + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            st = quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s", path,
                               r < 0 ? strerror(errno) : "short read");
        else
            got += (size_t)r;
    }
    if (st == QUANT_CK_OK) (*text)[n] = '\0';
    close(fd);
    if (st != QUANT_CK_OK) {
        free(*text);
        *text = NULL;
    }
    return st;
}

quant_ck_status quant_ct_config_beside(const char *file, quant_ct_config **out, quant_ck_error *err)
{
    if (!file || !out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    *out = NULL;
    const char *slash = strrchr(file, '/');
    size_t dlen = slash ? (size_t)(slash - file) + 1 : 0;
    char *path = malloc(dlen + sizeof "config.json");
    if (!path) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    memcpy(path, file, dlen);
    memcpy(path + dlen, "config.json", sizeof "config.json");
    char *text = NULL;
    quant_ck_status st = read_text(path, &text, err);
    if (st == QUANT_CK_OK && text) st = quant_ct_config_parse(text, path, out, err);
    free(text);
    free(path);
    return st;
}

void quant_ct_config_free(quant_ct_config *cfg)
{
    if (!cfg) return;
    json_decref(cfg->root);
    free(cfg->groups);
    free(cfg);
}

static bool targets_name(const json_t *targets, const char *module)
{
    size_t i;
    json_t *t;
    json_array_foreach(targets, i, t)
    {
        const char *s = json_string_value(t);
        if (s && strcmp(s, module) == 0) return true;
    }
    return false;
}

const ct_group *ct_config_group(const quant_ct_config *cfg, const char *module)
{
    if (!cfg || cfg->n == 0) return NULL;
    for (size_t i = 0; i < cfg->n; i++)
        if (targets_name(cfg->groups[i].targets, module)) return &cfg->groups[i];
    return cfg->n == 1 ? &cfg->groups[0] : NULL;
}

char *quant_ct_config_strip(const char *text, quant_ck_error *err)
{
    json_error_t je;
    json_t *root = text ? json_loads(text, 0, &je) : NULL;
    if (!json_is_object(root)) {
        quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "config.json: %s",
                      root   ? "not a JSON object"
                      : text ? je.text
                             : "NULL argument");
        json_decref(root);
        return NULL;
    }
    json_object_del(root, "quantization_config");
    char *out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!out) quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return out;
}
