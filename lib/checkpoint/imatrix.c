/* imatrix.c -- llama.cpp's importance matrices read into importance statistics (quant_imatrix.h):
 * the GGUF format through the GGUF reader, the legacy .dat parsed from memory with every count
 * and length checked against what the file holds; the values llama-quantize computes from each.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "ck_internal.h"
#include "gguf_internal.h"
#include "quant_gguf.h"
#include "quant_imatrix.h"

struct quant_imatrix {
    size_t n, cap;
    quant_importance *e; /* act, module_path and w owned */
};

static quant_ck_status nomem(quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

void quant_imatrix_free(quant_imatrix *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        free((char *)m->e[i].act);
        free((char *)m->e[i].module_path);
        free((float *)m->e[i].w);
    }
    free(m->e);
    free(m);
}

const quant_importance *quant_imatrix_entries(const quant_imatrix *m, size_t *n)
{
    if (n) *n = m ? m->n : 0;
    return m ? m->e : NULL;
}

/* Appends entry `name` (len bytes) taking `w` (n values, checked finite and >= 0). */
static quant_ck_status add(quant_imatrix *m, const char *path, const char *name, size_t len,
                           float *w, int64_t n, quant_ck_error *err)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(w[i]) || w[i] < 0) {
            double bad = (double)w[i];
            free(w);
            return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                                 "%s: entry '%.*s': value %lld is %g (must be finite and >= 0)",
                                 path, (int)(len < 200 ? len : 200), name, (long long)i, bad);
        }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        quant_importance *e = realloc(m->e, cap * sizeof *e);
        if (!e) {
            free(w);
            return nomem(err);
        }
        m->e = e;
        m->cap = cap;
    }
    char *act = strndup(name, len), *module = malloc(len + 1);
    if (!act || !module || !quant_module_path(act, module, len + 1)) {
        free(act);
        free(module);
        free(w);
        return nomem(err);
    }
    m->e[m->n++] = (quant_importance){.act = act, .module_path = module, .w = w, .n = n};
    return QUANT_CK_OK;
}

/* ---- GGUF -------------------------------------------------------------------------------------
 */

static bool ends_with(const char *s, const char *suffix, size_t *stem)
{
    size_t n = strlen(s), k = strlen(suffix);
    if (n <= k || strcmp(s + n - k, suffix)) return false;
    *stem = n - k;
    return true;
}

/* W.in_sum2 with W.counts: in_sum2 / count per column (a zero count weighs every column 1). */
static quant_ck_status gguf_entry(quant_imatrix *m, const quant_gguf_file *f,
                                  const quant_gguf_tensor *sums, size_t stem, quant_ck_error *err)
{
    char counts_name[QUANT_GGUF_MAX_NAME + 16];
    snprintf(counts_name, sizeof counts_name, "%.*s.counts", (int)stem, sums->name);
    const quant_gguf_tensor *counts = quant_gguf_find_tensor(f, counts_name);
    if (!counts)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: '%s' has no '%s' beside it", f->path,
                             sums->name, counts_name);
    if (sums->type != QUANT_GGML_F32 || counts->type != QUANT_GGML_F32)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: '%s' and '%s' must be F32", f->path,
                             sums->name, counts_name);
    if (sums->nrows != 1 || counts->ne[0] * counts->nrows != 1)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: '%.*s' holds %lld matrices (a model's experts): quantd takes "
                             "one importance vector per tensor",
                             f->path, (int)stem, sums->name, (long long)sums->nrows);
    int64_t n = sums->ne[0];
    float *w = malloc((size_t)(n ? n : 1) * sizeof *w), count_f = 0;
    if (!w) return nomem(err);
    quant_ck_status st = quant_gguf_read(f, sums, 0, w, (size_t)n * sizeof *w, err);
    if (st == QUANT_CK_OK) st = quant_gguf_read(f, counts, 0, &count_f, sizeof count_f, err);
    if (st != QUANT_CK_OK) {
        free(w);
        return st;
    }
    float count = isfinite(count_f) ? (float)lroundf(count_f) : 0.0f;
    for (int64_t i = 0; i < n; i++) w[i] = count > 0.0f ? w[i] / count : 1.0f;
    return add(m, f->path, sums->name, stem, w, n, err);
}

static quant_ck_status load_gguf(quant_imatrix *m, const char *path, quant_ck_error *err)
{
    quant_gguf_file *f = NULL;
    quant_ck_status st = quant_gguf_open(path, &f, err);
    if (st != QUANT_CK_OK) return st;
    const char *type = NULL;
    quant_ck_error ignore;
    bool typed = quant_gguf_get_string(f, "general.type", &type, &ignore) == QUANT_CK_OK &&
                 !strcmp(type, "imatrix");
    if (!typed && !quant_gguf_find_kv(f, "imatrix.datasets") &&
        !quant_gguf_find_kv(f, "imatrix.chunk_count"))
        st = quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                           "%s: a GGUF file, but not an importance matrix (no general.type "
                           "\"imatrix\", no imatrix.* keys)",
                           path);
    for (size_t i = 0; st == QUANT_CK_OK && i < f->n_tensors; i++) {
        size_t stem;
        if (ends_with(f->tensors[i].name, ".in_sum2", &stem))
            st = gguf_entry(m, f, &f->tensors[i], stem, err);
    }
    quant_gguf_close(f);
    return st;
}

/* ---- legacy .dat
 * --------------------------------------------------------------------------------- */

typedef struct cursor {
    const unsigned char *p, *end;
} cursor;

static bool take_i32(cursor *c, int32_t *v)
{
    if (c->end - c->p < 4) return false;
    memcpy(v, c->p, 4);
    c->p += 4;
    return true;
}

static quant_ck_status dat_entry(quant_imatrix *m, const char *path, cursor *c, int32_t i,
                                 quant_ck_error *err)
{
    int32_t len, ncall, nval;
    if (!take_i32(c, &len) || len < 1 || c->end - c->p < len)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: entry %d: its name runs past the end "
                             "of the file",
                             path, (int)i);
    const char *name = (const char *)c->p;
    c->p += len;
    if (!take_i32(c, &ncall) || !take_i32(c, &nval) || nval < 1 ||
        (uint64_t)(c->end - c->p) / 4 < (uint64_t)nval)
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: entry %d ('%.*s'): its values run past the end of the file", path,
                             (int)i, len < 200 ? len : 200, name);
    float *w = malloc((size_t)nval * sizeof *w);
    if (!w) return nomem(err);
    memcpy(w, c->p, (size_t)nval * sizeof *w);
    c->p += (size_t)nval * 4;
    for (int32_t k = 0; ncall > 0 && k < nval; k++) w[k] /= (float)ncall;
    if (memchr(name, 0, (size_t)len)) {
        free(w);
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: entry %d: a NUL byte in its name", path,
                             (int)i);
    }
    return add(m, path, name, (size_t)len, w, nval, err);
}

static quant_ck_status load_dat(quant_imatrix *m, const char *path, const unsigned char *buf,
                                size_t len, quant_ck_error *err)
{
    cursor c = {buf, buf + len};
    int32_t n;
    if (!take_i32(&c, &n) || n < 1 || (uint64_t)n > len / 13) /* 13: the smallest entry */
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT,
                             "%s: not an importance matrix (neither GGUF nor a legacy .dat with "
                             "entries)",
                             path);
    quant_ck_status st = QUANT_CK_OK;
    for (int32_t i = 0; st == QUANT_CK_OK && i < n; i++) st = dat_entry(m, path, &c, i, err);
    return st; /* the optional trailer (chunk count, dataset) is not needed */
}

static quant_ck_status read_whole(const char *path, unsigned char **buf, size_t *len,
                                  quant_ck_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        quant_ck_status st =
            quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > QUANT_IMATRIX_DAT_MAX) {
        close(fd);
        return quant_ck_fail(err, QUANT_CK_ERR_FORMAT, "%s: %s", path,
                             S_ISREG(sb.st_mode) ? "larger than 1 GiB: not an importance matrix"
                                                 : "not a regular file");
    }
    *len = (size_t)sb.st_size;
    *buf = malloc(*len ? *len : 1);
    ssize_t got = *buf ? pread(fd, *buf, *len, 0) : -1;
    close(fd);
    if (!*buf) return nomem(err);
    if (got < 0 || (size_t)got != *len) {
        free(*buf);
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: short read", path);
    }
    return QUANT_CK_OK;
}

quant_ck_status quant_imatrix_load(const char *path, quant_imatrix **out, quant_ck_error *err)
{
    if (!path || !out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    *out = NULL;
    quant_imatrix *m = calloc(1, sizeof *m);
    if (!m) return nomem(err);
    quant_ck_status st;
    if (quant_gguf_sniff(path)) {
        st = load_gguf(m, path, err);
    } else {
        unsigned char *buf = NULL;
        size_t len = 0;
        st = read_whole(path, &buf, &len, err);
        if (st == QUANT_CK_OK) st = load_dat(m, path, buf, len, err);
        free(buf);
    }
    if (st != QUANT_CK_OK) {
        quant_imatrix_free(m);
        return st;
    }
    *out = m;
    return QUANT_CK_OK;
}

/* ---- writing -----------------------------------------------------------------------------------
 */

typedef struct named {
    char name[QUANT_GGUF_MAX_NAME];
    const quant_importance *e;
} named;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* Each entry's weight name (GGUF's), sorted; two entries of one weight are an error. */
static quant_ck_status name_entries(const quant_importance *e, size_t n, named *out,
                                    quant_ck_error *err)
{
    for (size_t i = 0; i < n; i++) {
        char module[QUANT_GGUF_MAX_NAME];
        const char *m = ck_gguf_map_module(e[i].module_path, true, module, sizeof module)
                            ? module
                            : e[i].module_path;
        /* ".weight.in_sum2" must fit beside it */
        if (strlen(m) + 15 >= QUANT_GGUF_MAX_NAME || !e[i].n)
            return quant_ck_fail(err, QUANT_CK_ERR_ARG, "importance of '%.80s': %s",
                                 e[i].act ? e[i].act : m,
                                 e[i].n ? "its GGUF name is too long" : "no values");
        snprintf(out[i].name, sizeof out[i].name, "%.*s.weight", (int)sizeof out[i].name - 8, m);
        out[i].e = &e[i];
    }
    qsort(out, n, sizeof *out, by_name);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(out[i].name, out[i - 1].name))
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "importance of '%.80s' and '%.80s': both are weight %s",
                                 out[i - 1].e->act, out[i].e->act, out[i].name);
    return QUANT_CK_OK;
}

static quant_ck_status write_entries(quant_gguf_writer *w, const named *v, size_t n,
                                     const char *dataset, quant_ck_error *err)
{
    const char *sets[1] = {dataset ? dataset : "quantd"};
    quant_ck_status st = quant_gguf_writer_set_string(w, "general.type", "imatrix", err);
    if (st == QUANT_CK_OK) st = quant_gguf_writer_set_strings(w, "imatrix.datasets", sets, 1, err);
    if (st == QUANT_CK_OK) st = quant_gguf_writer_set_u32(w, "imatrix.chunk_count", 1, err);
    if (st == QUANT_CK_OK) st = quant_gguf_writer_set_u32(w, "imatrix.chunk_size", 1, err);
    for (size_t i = 0; st == QUANT_CK_OK && i < n; i++) {
        char sums[QUANT_GGUF_MAX_NAME + 8], counts[QUANT_GGUF_MAX_NAME + 8];
        snprintf(sums, sizeof sums, "%s.in_sum2", v[i].name);
        snprintf(counts, sizeof counts, "%s.counts", v[i].name);
        int64_t ne_s[2] = {v[i].e->n, 1}, ne_c[2] = {1, 1};
        st = quant_gguf_writer_add_tensor(w, sums, 2, ne_s, QUANT_GGML_F32, NULL, err);
        if (st == QUANT_CK_OK)
            st = quant_gguf_writer_add_tensor(w, counts, 2, ne_c, QUANT_GGML_F32, NULL, err);
    }
    if (st == QUANT_CK_OK) st = quant_gguf_writer_begin(w, err);
    const float one = 1.0f;
    for (size_t i = 0; st == QUANT_CK_OK && i < n; i++) {
        st = quant_gguf_writer_write(w, v[i].e->w, (size_t)v[i].e->n * sizeof(float), err);
        if (st == QUANT_CK_OK) st = quant_gguf_writer_write(w, &one, sizeof one, err);
    }
    if (st == QUANT_CK_OK) st = quant_gguf_writer_commit(w, err);
    return st;
}

quant_ck_status quant_imatrix_write(const char *path, const quant_importance *e, size_t n,
                                    const char *dataset, quant_ck_error *err)
{
    if (!path || (n && !e)) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "NULL argument");
    named *v = calloc(n ? n : 1, sizeof *v);
    if (!v) return nomem(err);
    quant_gguf_writer *w = NULL;
    quant_ck_status st = name_entries(e, n, v, err);
    if (st == QUANT_CK_OK) st = quant_gguf_writer_new(path, &w, err);
    if (st == QUANT_CK_OK) st = write_entries(w, v, n, dataset, err);
    quant_gguf_writer_free(w);
    free(v);
    return st;
}
